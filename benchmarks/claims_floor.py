"""The claims tier's compute floor: every run's counted FLOPs over all its rounds against this machine's
measured one-thread float32 rates (``benchmarks/claims_cost.py``'s default mode; benchmarks/README.md,
"The cost model").

1. **The runs**: the tier's plan as ``fedhet claims run`` makes it (:func:`fedhet.lab.claims.planning.plan_claims`
   over every claim of ``configs/claims``), each run's work drawn without training
   (:mod:`claims_plans`: participation and local plans of every round, the evaluation schedule).
2. **The FLOPs**: per layer of the model (:mod:`flop_count`: matrix products only, no input gradient for
   the first layer, the solver's gradients per step).
3. **The peak**: the best one-thread float32 ``torch.mm`` rate on 1024 and 2048 squares, timed here in CPU
   seconds (``time.process_time``: a shared machine disturbs CPU time less than wall time). The floor
   is FLOPs / peak.
4. **The realistic floor**: the same products at the runs' own shapes (each forward-and-backward pass
   of ``rows`` examples as its products, :func:`flop_count.step_products`; each evaluation pass as its
   forward products), timed here the same way at
   every row count the runs use when there are few, else at the most frequent ones and a geometric
   grid (interpolated linearly in the rows between grid points). The realistic floor is the sum over
   every pass of its measured seconds: what the products alone cost at these small shapes.
5. **Ratios**: with ``--runs DIR`` (a ``fedhet claims run`` output directory), each protocol's summed
   ``wall_seconds`` (each run's ``summary.json``: its rounds with their evaluations, start-up excluded)
   against both floors of the runs found there; with ``--tier-wall S`` the tier's measured wall time
   against both floors spread over ``--jobs`` cores (perfect packing).
"""
from __future__ import annotations

import bisect
import collections
import datetime
import json
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from claims_plans import Planner, Work
from flop_count import GRADIENTS_PER_STEP, Linear, forward_products, gradient_flops, step_products, time_products
from machine import machine
from result_files import write_results

GRID_RATIO = 1.5          # geometric grid of row counts when the runs use too many to time each
EXACT_LIMIT = 24          # time every row count when the runs use at most this many, else the most frequent
SMALL_BATCHES = (16, 50, 64)   # the claims' batches (FedAU; FedSpeed; the FedAWARE family): their rates are printed


def best_cpu_seconds(fn: Callable[[], object], calls: int, trials: int = 9) -> float:
    """Best per-call CPU seconds over ``trials`` loops of ``calls`` calls, after one warm-up call."""
    fn()
    best = math.inf
    for _ in range(trials):
        began = time.process_time()
        for _ in range(calls):
            fn()
        best = min(best, (time.process_time() - began) / calls)
    return best


def peak_flops() -> dict[str, float]:
    """One-thread float32 ``torch.mm`` FLOP/s on 1024 and 2048 squares; ``peak`` is the better."""
    rates = {}
    for n, calls in ((1024, 10), (2048, 2)):
        a, b, out = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
        rates[f"mm_{n}"] = 2 * n ** 3 / best_cpu_seconds(lambda: torch.mm(a, b, out=out), calls)
    rates["peak"] = max(rates.values())
    return rates


def timing_rows(counts: collections.Counter) -> list[int]:
    """The row counts to time: all when few, else the most frequent ones plus a geometric grid
    from the smallest to the largest (so every count lies between two timed ones)."""
    rows = sorted(counts)
    if len(rows) <= EXACT_LIMIT:
        return rows
    chosen = {rows[0], rows[-1], *(r for r, _ in counts.most_common(EXACT_LIMIT // 2))}
    value = float(rows[0])
    while value < rows[-1]:
        chosen.add(int(round(value)))
        value *= GRID_RATIO
    return sorted(chosen)


def interpolate(timed: dict[int, float], rows: int) -> float:
    """Seconds of ``rows`` rows from the timed row counts, linear between the two around it."""
    if rows in timed:
        return timed[rows]
    keys = sorted(timed)
    i = bisect.bisect_left(keys, rows)
    if i == 0 or i == len(keys):
        raise ValueError(f"{rows} rows lie outside the timed range {keys[0]}..{keys[-1]}")
    lo, hi = keys[i - 1], keys[i]
    return timed[lo] + (timed[hi] - timed[lo]) * (rows - lo) / (hi - lo)


def time_shapes(layers: list[Linear], counts: collections.Counter, products, extra: tuple[int, ...] = ()) -> dict[int, float]:
    """CPU seconds of the products of one pass (``products(layers, rows)``) at each row count to time
    (and at ``extra``, the rates the table reports)."""
    rows = sorted({*timing_rows(counts), *extra})
    return {r: time_products(products(layers, r), best_cpu_seconds) for r in rows}


def realistic_seconds(counts: collections.Counter, timed: dict[int, float]) -> float:
    return sum(count * interpolate(timed, rows) for rows, count in counts.items())


def run_walls(runs_dir: Path, names: dict[str, str]) -> dict[str, float]:
    """``{run name: wall_seconds}`` of the planned runs (``names``: run -> protocol) whose
    ``runs_dir/<protocol>/<run>/summary.json`` exists."""
    walls = {}
    for name, protocol in names.items():
        summary = runs_dir / protocol / name / "summary.json"
        if summary.exists():
            walls[name] = float(json.loads(summary.read_text())["wall_seconds"])
    return walls


def draw_tier(claims_dir: Path, tier: str, quick: bool = False) -> tuple[list[tuple[str, str, str, Work]], int]:
    """``[(protocol, method, run name, work)]`` of every planned run, and how many distinct draws were made.
    ``quick``: each run gets the work of its protocol and method's first seed (an estimate)."""
    from fedhet.lab.claims.definitions import load_suite
    from fedhet.lab.claims.planning import plan_claims, protocol_of

    suite = load_suite(claims_dir)
    with tempfile.TemporaryDirectory(prefix="claims-floor-") as scratch:
        plan = plan_claims(suite, suite.claims, scratch, tier=tier)
    planner = Planner()
    # Drawn federation by federation (the planner keeps one at a time), reported in plan order.
    order = sorted(plan.runs, key=lambda run: (run.seed, repr(run.config.data), repr(run.config.partition)))
    first = {}
    for run in plan.runs:
        first.setdefault((protocol_of(run), run.label), run)
    works = {}
    began = time.perf_counter()
    for i, run in enumerate(order, 1):
        drawn = first[(protocol_of(run), run.label)] if quick else run
        works[run.name] = planner.work(drawn.config)
        if i % 25 == 0 or i == len(order):
            print(f"claims_floor: drew {i}/{len(order)} runs ({len(planner.cache)} distinct draws, "
                  f"{time.perf_counter() - began:.0f} s)", flush=True)
    return [(protocol_of(run), run.label or "", run.name, works[run.name]) for run in plan.runs], len(planner.cache)


def floor(claims_dir: Path, tier: str = "default", runs_dir: Optional[Path] = None, tier_wall: Optional[float] = None,
          jobs: int = 2, quick: bool = False, out: Optional[Path] = None, command: str = "") -> dict[str, Any]:
    """Count, time and print the tier's floor (module docstring); writes ``claims-floor-<stamp>.json/.md``
    under ``out`` when given. Returns the record."""
    torch.set_num_threads(1)
    meta = {"machine": machine(f"torch {torch.__version__}", "1 torch thread"), "command": command,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "load_before": " ".join(f"{x:.2f}" for x in os.getloadavg()),
            "tier": tier, "jobs": jobs,
            "drawn": "the first seed of each protocol and method, for every seed (--quick)" if quick else "every run"}
    print(f"claims_floor: {meta['machine']}; load average {meta['load_before']}", flush=True)
    runs, draws = draw_tier(claims_dir, tier, quick)
    layers = runs[0][3].layers
    if any(work.layers != layers for *_, work in runs):
        raise ValueError("the tier's runs train different models; the cost model times one model's shapes")
    train_counts: collections.Counter = collections.Counter()
    eval_counts: collections.Counter = collections.Counter()
    for *_, work in runs:
        train_counts.update(work.train)
        eval_counts.update(work.evaluate)
    peaks = peak_flops()
    train_timed = time_shapes(layers, train_counts, step_products, extra=SMALL_BATCHES)
    eval_timed = time_shapes(layers, eval_counts, forward_products)
    rates = {"peak_gflops": peaks["peak"] / 1e9, "mm_1024_gflops": peaks["mm_1024"] / 1e9,
             "mm_2048_gflops": peaks["mm_2048"] / 1e9,
             **{f"step_batch_{rows}_gflops": gradient_flops(layers, rows) / train_timed[rows] / 1e9
                for rows in SMALL_BATCHES}}
    print("claims_floor: one-thread float32 rates (GFLOP/s): " + ", ".join(f"{k[:-7]} {v:.0f}" for k, v in rates.items()),
          flush=True)
    names = {name: protocol for protocol, _, name, _ in runs}
    walls = run_walls(runs_dir, names) if runs_dir is not None else {}
    rows = []
    for protocol in dict.fromkeys(p for p, *_ in runs):
        mine = [(method, name, work) for p, method, name, work in runs if p == protocol]
        row: dict[str, Any] = {"protocol": protocol, "runs": len(mine),
                               "methods": sorted({m for m, _, _ in mine}),
                               "steps": sum(w.steps for *_, w in mine),
                               "gradient_passes": sum(sum(w.train.values()) for *_, w in mine),
                               "evaluations": sum(w.evaluations for *_, w in mine),
                               "train_flops": sum(w.train_flops() for *_, w in mine),
                               "eval_flops": sum(w.eval_flops() for *_, w in mine),
                               "three_forwards_train_flops": sum(w.three_forwards_flops() for *_, w in mine)}
        row["floor_s"] = (row["train_flops"] + row["eval_flops"]) / peaks["peak"]
        row["realistic_train_s"] = sum(realistic_seconds(w.train, train_timed) for *_, w in mine)
        row["realistic_eval_s"] = sum(realistic_seconds(w.evaluate, eval_timed) for *_, w in mine)
        row["realistic_s"] = row["realistic_train_s"] + row["realistic_eval_s"]
        found = [(name, work) for _, name, work in mine if name in walls]
        if found:
            flops = sum(w.train_flops() + w.eval_flops() for _, w in found)
            realistic = sum(realistic_seconds(w.train, train_timed) + realistic_seconds(w.evaluate, eval_timed)
                            for _, w in found)
            row["measured"] = {"runs": len(found), "wall_s": sum(walls[n] for n, _ in found),
                               "floor_s": flops / peaks["peak"], "realistic_s": realistic}
            row["measured"]["ratio_floor"] = row["measured"]["wall_s"] / row["measured"]["floor_s"]
            row["measured"]["ratio_realistic"] = row["measured"]["wall_s"] / realistic
        rows.append(row)
    tier_row: dict[str, Any] = {key: sum(r[key] for r in rows) for key in ("runs", "steps", "gradient_passes", "evaluations", "train_flops",
                                                            "eval_flops", "three_forwards_train_flops", "floor_s", "realistic_train_s",
                                                            "realistic_eval_s", "realistic_s")}
    measured_rows = [r["measured"] for r in rows if "measured" in r]
    if measured_rows:
        summed: dict[str, float] = {key: sum(m[key] for m in measured_rows)
                                    for key in ("runs", "wall_s", "floor_s", "realistic_s")}
        summed["ratio_floor"] = summed["wall_s"] / summed["floor_s"]
        summed["ratio_realistic"] = summed["wall_s"] / summed["realistic_s"]
        tier_row["measured"] = summed
    tier_row["floor_wall_s"] = tier_row["floor_s"] / jobs
    tier_row["realistic_wall_s"] = tier_row["realistic_s"] / jobs
    if tier_wall is not None:
        tier_row["measured_wall_s"] = tier_wall
        tier_row["ratio_floor"] = tier_wall / tier_row["floor_wall_s"]
        tier_row["ratio_realistic"] = tier_wall / tier_row["realistic_wall_s"]
    meta["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    record = {"meta": meta, "rates": rates, "distinct_draws": draws, "layers": [vars(layer) for layer in layers],
              "gradients_per_step": {name: count for name, (count, _) in GRADIENTS_PER_STEP.items()},
              "train_timed_s": train_timed, "eval_timed_s": eval_timed, "protocols": rows, "tier": tier_row,
              "runs_dir": str(runs_dir) if runs_dir else None}
    table = markdown(record)
    if out is not None:
        write_results(out, "claims-floor", record, table)
    else:
        print(table)
    return record


def markdown(record: dict[str, Any]) -> str:
    meta, rates, tier = record["meta"], record["rates"], record["tier"]
    lines = [f"# Claims tier's compute floor ({meta['date']})", "", f"Machine: {meta['machine']}",
             f"Load average before / after: {meta['load_before']} / {meta['load_after']}",
             f"Command: `{meta['command']}`", f"Tier: {meta['tier']}; drawn: {meta['drawn']}", "",
             "One-thread float32 rates, CPU-timed: peak " f"{rates['peak_gflops']:.1f} GFLOP/s (best of 1024^3 "
             f"{rates['mm_1024_gflops']:.1f}, 2048^3 {rates['mm_2048_gflops']:.1f}); a training pass's products at "
             + ", ".join(f"batch {k.split('_')[2]} {v:.1f}" for k, v in rates.items() if k.startswith("step_batch")),
             "", "| protocol | runs | local steps | gradient passes | evaluations | train TFLOP | eval TFLOP | "
             "floor CPU s | realistic CPU s | measured wall s (runs) | / floor | / realistic |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in record["protocols"] + [{**tier, "protocol": "**tier**"}]:
        measured = r.get("measured")
        cells = ([f"{measured['wall_s']:,.0f} ({measured['runs']})", f"{measured['ratio_floor']:.2f}x",
                  f"{measured['ratio_realistic']:.2f}x"] if measured else ["-", "-", "-"])
        lines.append(f"| {r['protocol']} | {r['runs']} | {r['steps']:,} | {r['gradient_passes']:,} | {r['evaluations']:,} | "
                     f"{r['train_flops'] / 1e12:.1f} | {r['eval_flops'] / 1e12:.1f} | {r['floor_s']:,.0f} | "
                     f"{r['realistic_s']:,.0f} | " + " | ".join(cells) + " |")
    lines += ["", f"**Tier floor: {(tier['train_flops'] + tier['eval_flops']) / 1e12:.1f} TFLOP "
              f"(training {tier['train_flops'] / 1e12:.1f}, evaluation {tier['eval_flops'] / 1e12:.1f}) = "
              f"{tier['floor_s']:,.0f} CPU s at the peak, {tier['floor_wall_s'] / 60:.1f} min on {meta['jobs']} cores; "
              f"realistic floor {tier['realistic_s']:,.0f} CPU s = {tier['realistic_wall_s'] / 60:.1f} min** "
              "(perfect packing, the products only)."]
    old = tier["three_forwards_train_flops"] + tier["eval_flops"]
    lines.append(f"The same plans by the replaced rule (training 3x the forward, one gradient a step) and its assumed "
                 f"100 GFLOP/s: {old / 1e12:.1f} TFLOP (training {tier['three_forwards_train_flops'] / 1e12:.1f}), "
                 f"{old / 100e9 / meta['jobs'] / 60:.1f} min on {meta['jobs']} cores.")
    if "measured_wall_s" in tier:
        lines.append(f"Measured tier wall time {tier['measured_wall_s'] / 60:.1f} min: {tier['ratio_floor']:.2f}x the floor, "
                     f"{tier['ratio_realistic']:.2f}x the realistic floor.")
    return "\n".join(lines)

