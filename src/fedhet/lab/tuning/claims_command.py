"""``fedhet tune-claims``: the claims' pre-registered tuning (configs/claims/tuning.toml), and its tables.

Writes into ``--out`` (each file atomically): ``results.md`` (per search: every grid point's criterion, the
chosen point marked, the edge extensions; for docs/claims.md), ``results.json`` (the same as data) and
``chosen.toml`` (the chosen values with their ``lr_source``, to replace the "pending" values of
``protocols.toml``). Rerunning continues where it stopped.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional, Sequence

from fedhet.config import toml_literal
from fedhet.core import atomic_write_text
from fedhet.lab.tuning.preregistered import TuningPlan, load_plan
from fedhet.lab.tuning.staged import SearchOutcome, run_preregistered_search

DEFAULT_PLAN = "configs/claims/tuning.toml"


def _cell(value) -> str:
    return "" if value is None else (f"{value:.6g}" if isinstance(value, float) else str(value))


def results_markdown(outcomes: Sequence[SearchOutcome], command: str) -> str:
    lines = ["# Tuning of the claims' methods (configs/claims/tuning.toml)", "",
             f"Produced by `{command}`. Every grid point's criterion; `*` marks the chosen point of each stage. "
             "The choice read only the criterion, never the test set.", ""]
    for outcome in outcomes:
        search = outcome.search
        keys = [knob.key for knob in search.knobs]
        lines += [f"## {search.target}", "",
                  f"criterion `{search.criterion.text}` ({search.criterion.direction}) at round {outcome.horizon}, "
                  f"tier {outcome.tier}, " + (f"run.seed {outcome.seed}" if len(outcome.seeds) < 2 else
                                              f"seeds {', '.join(map(str, outcome.seeds))} (the mean)")
                  + "; chosen: "
                  + ", ".join(f"`{k} = {_cell(v)}`" for k, v in outcome.chosen.items()), ""]
        if outcome.extensions:
            lines += ["edge rule: " + "; ".join(outcome.extensions), ""]
        if outcome.stability:
            lines += ["stability rule: " + "; ".join(outcome.stability), ""]
        lines += ["| stage | " + " | ".join(f"`{k}`" for k in keys) + f" | state | {search.criterion.text} | |",
                  "|" + " --- |" * (len(keys) + 4)]
        chosen_by_stage = {}
        for point in outcome.points:
            best = chosen_by_stage.get(point.stage)
            if point.state == "complete" and point.eligible is not False and (best is None or (
                    point.value > best.value if search.criterion.maximize else point.value < best.value)):
                chosen_by_stage[point.stage] = point
        for point in outcome.points:
            mark = "*" if chosen_by_stage.get(point.stage) is point else ""
            state = point.state + (" (next step unstable)" if point.eligible is False else "")
            seeds = (" (" + ", ".join(_cell(v) if v is not None else "failed" for v in point.per_seed.values()) + ")"
                     if len(point.per_seed) > 1 else "")
            lines.append(f"| {point.stage} | " + " | ".join(_cell(point.values.get(k)) for k in keys)
                         + f" | {state} | {_cell(point.value)}{seeds} | {mark} |")
        lines.append("")
    return "\n".join(lines)


def chosen_toml(outcomes: Sequence[SearchOutcome]) -> str:
    lines = ["# The chosen values (fedhet tune-claims): copy each table's keys into protocols.toml's method table."]
    for outcome in outcomes:
        search = outcome.search
        lines += ["", f"[protocol.{search.protocol}.method.{search.method}]",
                  f"lr_source = {toml_literal(f'tuned: tune_claims.sh, {search.criterion.text}@{outcome.horizon}, ' + _seeds_text(outcome))}"]
        lines += [f"{key} = {toml_literal(value)}" for key, value in outcome.chosen.items()]
    return "\n".join(lines) + "\n"


def _seeds_text(outcome: SearchOutcome) -> str:
    seeds = outcome.seeds or (outcome.seed,)
    return f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {', '.join(map(str, seeds))}"


def results_json(outcomes: Sequence[SearchOutcome]) -> dict:
    return {"searches": [{
        "search": o.search.target, "criterion": o.search.criterion.text, "direction": o.search.criterion.direction,
        "horizon": o.horizon, "tier": o.tier, "seed": o.seed, "seeds": list(o.seeds or (o.seed,)),
        "chosen": o.chosen, "chosen_value": o.chosen_value, "extensions": o.extensions, "stability": o.stability,
        "points": [{"stage": p.stage, "values": p.values, "state": p.state, "criterion": p.value,
                    "per_seed": {str(seed): value for seed, value in p.per_seed.items()}, "eligible": p.eligible,
                    "test_accuracy (not used)": p.test_accuracy, "directory": p.directory} for p in o.points]}
        for o in outcomes]}


def describe_plan(plan: TuningPlan, only: Optional[list[str]], tier: str) -> str:
    rows = []
    for search in plan.select(only):
        protocol = plan.protocols[search.protocol]
        stages = " then ".join(" x ".join(f"{k.name}{list(k.values)}" for k in stage) for stage in search.stages)
        seeds = search.seeds or (protocol.tuning_seed,)
        rows.append(f"{search.target}: {search.grid_size() * len(seeds)} trials before edge extensions"
                    + (" and stability checks" if search.stability else "") + f"; {stages}; "
                    f"criterion {search.criterion.text}; run.seed {', '.join(map(str, seeds))}"
                    + (f"; stability under {', '.join(search.stability)}" if search.stability else ""))
    total = sum(s.grid_size() * len(s.seeds or (0,)) for s in plan.select(only))
    return "\n".join(rows + [f"total: {total} trials (tier {tier}), before edge extensions"])


def tune_claims_command(plan_path: str, *, tier: str, only: Optional[list[str]], out: Optional[str], jobs: int,
                        dry_run: bool, command: str) -> int:
    plan = load_plan(plan_path)
    if dry_run:
        print(describe_plan(plan, only, tier))
        return 0
    out_dir = Path(out) if out else Path("runs") / ("tune_claims" if tier == "default" else f"tune_claims_{tier}")
    outcomes = []
    for search in plan.select(only):
        outcomes.append(run_preregistered_search(plan, search, out_dir, tier=tier, jobs=jobs,
                                                 log=lambda message: print(message, file=sys.stderr, flush=True)))
        # Written after every search, so an interrupted plan still shows what has finished.
        atomic_write_text(out_dir / "results.md", results_markdown(outcomes, command))
        atomic_write_text(out_dir / "results.json", json.dumps(results_json(outcomes), indent=1) + "\n")
        atomic_write_text(out_dir / "chosen.toml", chosen_toml(outcomes))
    for outcome in outcomes:
        print(f"{outcome.search.target}: " + ", ".join(f"{k} = {_cell(v)}" for k, v in outcome.chosen.items())
              + f"  ({outcome.search.criterion.text} = {_cell(outcome.chosen_value)})")
    print(f"written: {out_dir / 'results.md'}, {out_dir / 'results.json'}, {out_dir / 'chosen.toml'}")
    return 0


def add_tune_claims_command(sub) -> None:
    """The ``tune-claims`` subcommand of the ``fedhet`` parser."""
    parser = sub.add_parser(
        "tune-claims", help="run the claims' pre-registered tuning (configs/claims/tuning.toml; resumable)",
        description="Run every search of the pre-registered tuning plan (docs/claims.md, \"Tuning "
                    "(pre-registered)\"): each method's knobs on their grids, the edge rule, a criterion that "
                    "never reads the test set. Writes OUT/results.md, results.json and chosen.toml.")
    parser.add_argument("--plan", default=DEFAULT_PLAN, help=f"the tuning plan (default {DEFAULT_PLAN})")
    parser.add_argument("--tier", choices=("default", "quick"), default="default",
                        help="the protocols' tier whose horizon the trials run (default: the regime; quick: "
                             "minutes, to check the pipeline, not for use)")
    parser.add_argument("--only", metavar="PROTOCOL/METHOD,...", help="run these searches only")
    parser.add_argument("--out", metavar="DIR", help="default runs/tune_claims (runs/tune_claims_quick)")
    parser.add_argument("--jobs", type=int, default=1, metavar="N", help="trials in parallel (sweep workers)")
    parser.add_argument("--dry-run", action="store_true", help="list the searches and their trial counts")
    parser.set_defaults(handler=_handler)


def _handler(args: argparse.Namespace) -> int:
    command = "fedhet " + " ".join(sys.argv[1:]) if sys.argv[1:2] == ["tune-claims"] else "fedhet tune-claims"
    try:
        return tune_claims_command(args.plan, tier=args.tier, only=args.only.split(",") if args.only else None,
                                   out=args.out, jobs=args.jobs, dry_run=args.dry_run, command=command)
    except KeyboardInterrupt:
        print("fedhet: interrupted; run the same `fedhet tune-claims` command again to continue",
              file=sys.stderr)
        return 130

