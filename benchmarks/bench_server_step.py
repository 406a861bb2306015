"""FedAWARE's server step at N = 1000, d = 1e6 before and after the table kernels, per store dtype.

For each store dtype (float32, bfloat16; one ``[N, d]`` table alive at a time) and each kind of
momenta, the table is filled by server steps of 100 clients (every momentum set, the Gram matrix
over all N, as in a run after its first sweep). Then, for each number of participants K, steps
alternate between

- **before**: the code as it was (the Gram rows and the weighted sum on the caller's single torch
  thread; the weighted sum is the dense blocked loop, ``legacy_weighted_rows`` below, a verbatim
  copy of the replaced function; 16-bit stores: Gram blocks of ``2**22`` values and
  ``ClientStore.read`` as it was, ``legacy_read``), and
- **after**: the table kernels (``fedhet.server.table_kernels``) on ``--threads`` threads,

``--steps`` of each; the medians are reported with the parts of the step (momentum update + Gram
rows, min-norm solve, weighted sum; the rest is the server optimiser). Once per (dtype, K) the
Gram update and the weighted sum are also computed both ways on the same state and compared
bitwise.

Momenta: ``gaussian`` (independent updates ``0.01 N(0, I)``: nearly orthogonal momenta, whose
min-norm weights are all non-zero, the worst case for the weighted sum) and ``lowrank`` (updates in
an 8-dimensional subspace with a common direction, ``(1 + 0.5 z) B``, ``z ~ N(0, I_8)``, ``B`` 8 random
directions: min-norm weights with at most 9 non-zeros, as the usually sparse weights of training).

An ``auto`` CNN round (workload W, ``bench_w.py --models cnn --impls fedhet-auto``) is measured in
the same session before the step benchmark, and the step times are given as its fraction.

Usage: .venv/bin/python benchmarks/bench_server_step.py [--num-clients 1000] [--dim 1e6]
           [--per-round 10,100] [--dtypes float32,bfloat16] [--momenta gaussian,lowrank] [--steps 2]
           [--threads N] [--cnn-rounds 3 | --cnn-file results/w-*.json] [--out benchmarks/results]
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

import fedhet.components  # noqa: F401  (registers every component)
from fedhet.backends.base import usable_cpus
from fedhet.core.cohort import Cohort
from fedhet.core.options import build_options
from fedhet.core.registry import SERVERS
from fedhet.core.store import ClientStore, StoreOptions
from fedhet.server import aware_direction, gram as gram_module
from fedhet.server.base import ServerContext
from fedhet.server.gram import gram_update

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from machine import machine  # noqa: E402

RANK = 8


def legacy_weighted_rows(store: ClientStore, ids: torch.Tensor, coefficients: torch.Tensor) -> torch.Tensor:
    """aware_direction._weighted_rows before server/table_kernels.py (verbatim), for the "before" column."""
    dense = torch.zeros(store.num_clients, dtype=torch.float64)
    dense[ids] = coefficients.to(torch.float64)
    total = torch.zeros(store.dim, dtype=store.compute_dtype, device=store.table.device)
    for start, stop in store.row_blocks(aware_direction._BLOCK_BYTES):
        block = dense[start:stop]
        if not bool((block != 0).any()):
            continue
        rows = store.read_range(start, stop)
        total += block.to(device=rows.device, dtype=rows.dtype) @ rows
    return total


def legacy_read(self: ClientStore, ids: torch.Tensor, device=None) -> torch.Tensor:
    """ClientStore.read before this change (verbatim): always a gather, then the upcast."""
    rows = self.table.index_select(0, ids.to(self.table.device))
    return rows.to(device=device or self.table.device, dtype=self.compute_dtype)


_READ = ClientStore.read
_UPCAST_BLOCK_VALUES = gram_module._UPCAST_BLOCK_VALUES
_LEGACY_GRAM_BLOCK_VALUES = 1 << 22


class Parts:
    """Wall seconds of the step's parts, by wrapping the direction module's (fedhet.server.aware_direction) module-level calls."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.weighted_rows = aware_direction._weighted_rows

    def wrap(self, name, function):
        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started
        return timed

    def install(self, legacy: bool):
        ClientStore.read = legacy_read if legacy else _READ
        gram_module._UPCAST_BLOCK_VALUES = _LEGACY_GRAM_BLOCK_VALUES if legacy else _UPCAST_BLOCK_VALUES
        aware_direction.gram_update = self.wrap("gram", gram_update)
        aware_direction.min_norm_weights = self.wrap("solve", _MIN_NORM)
        aware_direction._weighted_rows = self.wrap("weighted_sum", legacy_weighted_rows if legacy else self.weighted_rows)


_MIN_NORM = aware_direction.min_norm_weights


def make_updates(kind: str, count: int, dim: int, generator: torch.Generator, basis: torch.Tensor | None):
    if kind == "gaussian":
        return 0.01 * torch.randn(count, dim, generator=generator)
    z = 1.0 + 0.5 * torch.randn(count, RANK, generator=generator)
    return 0.01 * (z @ basis)


def measure(dtype: str, kind: str, num_clients: int, dim: int, per_round: list[int], steps: int,
            threads: int, seed: int = 0) -> list[dict]:
    torch.set_num_threads(1)          # a run's main process (run.threads unset)
    entry = SERVERS.get("fedaware")
    server = entry.factory(build_options(entry.options_cls, {}, section="server"))
    generator = torch.Generator().manual_seed(seed)
    basis = torch.randn(RANK, dim, generator=generator) / dim ** 0.5 if kind == "lowrank" else None
    sizes = torch.full((num_clients,), 600, dtype=torch.int64)
    stores: list[ClientStore] = []

    def make_store(name, subset=None):
        stores.append(ClientStore(name, num_clients, dim, options=StoreOptions(dtype=dtype, threads=threads),
                                  subset=subset))
        return stores[-1]

    def context(round_index):
        return ServerContext(round_index=round_index, num_clients=num_clients, make_store=make_store)

    def cohort(ids):
        k = len(ids)
        return Cohort(client_ids=ids, deltas=make_updates(kind, k, dim, generator, basis), num_examples=sizes[ids],
                      local_steps=torch.full((k,), 19), train_loss=torch.zeros(k))

    parts = Parts()
    parts.install(legacy=False)
    params = torch.zeros(dim)
    state = server.init(params, context(0))
    store = stores[0]
    round_index = 0
    started = time.perf_counter()
    for start in range(0, num_clients, 100):
        ids = torch.arange(start, min(start + 100, num_clients))
        params, state, _ = server.step(state, params, cohort(ids), context(round_index))
        round_index += 1
    fill_seconds = time.perf_counter() - started
    rows = []
    for k in per_round:
        timings = {"before": [], "after": []}
        cpu = {"before": [], "after": []}
        part_times = {"before": [], "after": []}
        last_metrics = {}
        for repeat in range(steps):
            for variant in (("before", "after") if repeat % 2 == 0 else ("after", "before")):
                legacy = variant == "before"
                store.options = dataclasses.replace(store.options, threads=1 if legacy else threads)
                parts.install(legacy)
                parts.seconds = {}
                ids = torch.randperm(num_clients, generator=generator)[:k].sort().values
                work = cohort(ids)
                begun, begun_cpu = time.perf_counter(), time.process_time()
                params, state, metrics = server.step(state, params, work, context(round_index))
                timings[variant].append(time.perf_counter() - begun)
                cpu[variant].append(time.process_time() - begun_cpu)   # every thread of this process
                part_times[variant].append(dict(parts.seconds))
                last_metrics = metrics
                round_index += 1
                del work
        # Bitwise check on one state: the Gram update of K fresh ids and the weighted sum of this
        # state's weights, computed the old way and the new way.
        aggregator = state.aggregator
        ids = torch.randperm(num_clients, generator=generator)[:k].sort().values
        accumulate = aware_direction._accumulate_dtype(store)
        gram = aggregator.gram
        grams = []
        for legacy in (True, False):
            parts.install(legacy)
            grams.append(gram_update(gram, aware_direction._row_source(store), ids, accumulate_dtype=accumulate,
                                     threads=1 if legacy else threads))
        old_gram, new_gram = grams
        del grams
        solved = aware_direction.MomentumDirection(aware_direction.DirectionSettings()).solve(aggregator)
        weight_ids, weights, norms, _ = solved
        coefficients = weights / norms
        old_sum = legacy_weighted_rows(store, weight_ids, coefficients)
        new_sum = parts.weighted_rows(store, weight_ids, coefficients)
        row = {"store_dtype": dtype, "momenta": kind, "num_clients": num_clients, "dim": dim,
               "clients_per_round": k, "threads": threads, "fill_seconds": fill_seconds,
               "before_seconds": statistics.median(timings["before"]),
               "after_seconds": statistics.median(timings["after"]),
               "before_all": timings["before"], "after_all": timings["after"],
               "before_cpu_seconds": statistics.median(cpu["before"]),
               "after_cpu_seconds": statistics.median(cpu["after"]),
               "before_cpu_all": cpu["before"], "after_cpu_all": cpu["after"],
               "before_parts": part_times["before"], "after_parts": part_times["after"],
               "nonzero_weights": last_metrics.get("aware_num_nonzero"),
               "solver_iterations": last_metrics.get("solver_iterations"),
               "gram_bitwise_equal": bool(torch.equal(old_gram, new_gram)),
               "weighted_sum_bitwise_equal": bool(torch.equal(old_sum, new_sum))}
        rows.append(row)
        del old_gram, new_gram, old_sum, new_sum
        print(f"bench_server_step: {dtype} {kind} K={k}: before {row['before_seconds']:.3f} s "
              f"(CPU {row['before_cpu_seconds']:.3f} s), after {row['after_seconds']:.3f} s "
              f"(CPU {row['after_cpu_seconds']:.3f} s, {threads} threads); non-zero weights {row['nonzero_weights']}; "
              f"bitwise gram {row['gram_bitwise_equal']}, sum {row['weighted_sum_bitwise_equal']}; "
              f"parts after {part_times['after'][-1]}", flush=True)
    parts.install(legacy=False)
    ClientStore.read = _READ
    aware_direction.gram_update, aware_direction.min_norm_weights = gram_update, _MIN_NORM
    aware_direction._weighted_rows = parts.weighted_rows
    del state, stores, store, params
    gc.collect()
    return rows


def auto_cnn_round(rounds: int, out: Path) -> dict:
    """Seconds per round of fedhet ``auto`` on W-CNN, by bench_w.py in a subprocess."""
    command = [sys.executable, str(HERE / "bench_w.py"), "--models", "cnn", "--impls", "fedhet-auto",
               "--repeats", "1", "--rounds", str(rounds), "--no-peers", "--out", str(out)]
    completed = subprocess.run(command, capture_output=True, text=True, check=True, cwd=str(HERE.parent))
    line = next(line for line in completed.stdout.splitlines() if line.startswith("bench_w: wrote "))
    json_path = Path(line.split("wrote ", 1)[1].split(" and ", 1)[0]).with_suffix(".json")
    return {**cnn_round_from(json_path), "command": " ".join(command)}


def cnn_round_from(json_path: Path) -> dict:
    """The auto CNN round of a bench_w.py results file: wall seconds per round, and CPU seconds of
    the process tree (start-up and evaluation included) per round."""
    result = json.loads(json_path.read_text())
    rows = [r for r in result["summary"] if r.get("impl") == "fedhet-auto" and r.get("model") == "cnn"]
    if not rows or "seconds_per_round" not in rows[0]:
        raise RuntimeError(f"{json_path} has no timed auto CNN run: {rows}")
    rounds = max(1, round(rows[0]["wall_seconds"] / rows[0]["seconds_per_round"]))
    try:
        shown = str(json_path.resolve().relative_to(HERE.parent))
    except ValueError:
        shown = str(json_path)
    return {"seconds_per_round": rows[0]["seconds_per_round"], "rounds": rounds,
            "cpu_seconds_per_round": rows[0].get("cpu_seconds", float("nan")) / rounds, "file": shown}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-clients", type=int, default=1000)
    parser.add_argument("--dim", type=float, default=1e6)
    parser.add_argument("--per-round", default="10,100")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--momenta", default="gaussian,lowrank")
    parser.add_argument("--steps", type=int, default=2, help="timed steps per variant (alternating)")
    parser.add_argument("--threads", type=int, default=usable_cpus())
    parser.add_argument("--cnn-rounds", type=int, default=3)
    parser.add_argument("--cnn-file", default=None,
                        help="a bench_w.py results file (w-*.json) with the auto CNN round (skips the CNN run)")
    parser.add_argument("--out", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print("bench_server_step: " + " ".join([sys.executable, *sys.argv]), flush=True)
    results = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "machine": machine(), "command": " ".join([sys.executable, *sys.argv]),
               "load_start": os.getloadavg(), "rows": []}
    if args.cnn_file is None:
        results["cnn_round"] = auto_cnn_round(args.cnn_rounds, out)
    else:
        results["cnn_round"] = cnn_round_from(Path(args.cnn_file))
    cnn = results["cnn_round"]["seconds_per_round"]
    print(f"bench_server_step: auto CNN round {cnn:.3f} s, CPU {results['cnn_round']['cpu_seconds_per_round']:.3f} s "
          f"({results['cnn_round']['file']})", flush=True)
    for dtype in [d for d in args.dtypes.split(",") if d]:
        for kind in [m for m in args.momenta.split(",") if m]:
            results["rows"].extend(measure(dtype, kind, args.num_clients, int(args.dim),
                                           [int(k) for k in args.per_round.split(",")], args.steps, args.threads))
    results["load_end"] = os.getloadavg()
    lines = [f"FedAWARE server step, N = {args.num_clients}, d = {int(args.dim):.0e}; auto CNN round "
             f"{cnn:.3f} s, CPU {results['cnn_round']['cpu_seconds_per_round']:.3f} s "
             f"({results['cnn_round']['file']}); {results['machine']}; load {results['load_start'][0]:.1f} at the start, "
             f"{results['load_end'][0]:.1f} at the end", "",
             "| store | momenta | K | non-zero weights | before s | after s | after / CNN round | before CPU s | "
             "after CPU s | bitwise |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for row in results["rows"]:
        lines.append(f"| {row['store_dtype']} | {row['momenta']} | {row['clients_per_round']} | "
                     f"{row['nonzero_weights']:.0f} | {row['before_seconds']:.3f} | {row['after_seconds']:.3f} | "
                     f"{100 * row['after_seconds'] / cnn:.1f}% | {row['before_cpu_seconds']:.3f} | "
                     f"{row['after_cpu_seconds']:.3f} | "
                     f"{'yes' if row['gram_bitwise_equal'] and row['weighted_sum_bitwise_equal'] else 'NO'} |")
    print("\n".join(lines))
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    path = out / f"server-step-{stamp}.json"
    path.with_suffix(".tmp").write_text(json.dumps(results, indent=1))
    os.replace(path.with_suffix(".tmp"), path)
    markdown = out / f"server-step-{stamp}.md"
    markdown.with_suffix(".tmp").write_text("\n".join(lines) + "\n")
    os.replace(markdown.with_suffix(".tmp"), markdown)
    print(f"bench_server_step: wrote {path} and {markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
