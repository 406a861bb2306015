"""``fedhet tune-claims``: the claims' pre-registered tuning (configs/claims/tuning.toml): its arguments,
and the plan run from parsed command-line values to an exit code.

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
from typing import Optional

from fedhet.core import atomic_write_text
from fedhet.lab.commands.executor_flags import add_lockstep_flag
from fedhet.lab.tuning.plan_outputs import chosen_toml, describe_plan, display_value, results_json, results_markdown
from fedhet.lab.tuning.preregistered import load_plan
from fedhet.lab.tuning.staged import run_preregistered_search

DEFAULT_PLAN = "configs/claims/tuning.toml"


def tune_claims_command(plan_path: str, *, tier: str, only: Optional[list[str]], out: Optional[str], jobs: int,
                        dry_run: bool, command: str, lockstep: Optional[str] = None) -> int:
    """``lockstep`` (``off`` / ``on`` / ``auto``; default ``auto``: on a CUDA device only): each grid's
    trials train together (``fedhet tune --lockstep``)."""
    from fedhet.lab.sweep.options import sweep_options

    lockstep = sweep_options(None, {"lockstep": lockstep}).lockstep
    plan = load_plan(plan_path)
    if dry_run:
        print(describe_plan(plan, only, tier))
        return 0
    out_dir = Path(out) if out else Path("runs") / ("tune_claims" if tier == "default" else f"tune_claims_{tier}")
    outcomes = []
    for search in plan.select(only):
        outcomes.append(run_preregistered_search(plan, search, out_dir, tier=tier, jobs=jobs, lockstep=lockstep,
                                                 log=lambda message: print(message, file=sys.stderr, flush=True)))
        # Written after every search, so an interrupted plan still shows what has finished.
        atomic_write_text(out_dir / "results.md", results_markdown(outcomes, command))
        atomic_write_text(out_dir / "results.json", json.dumps(results_json(outcomes), indent=1) + "\n")
        atomic_write_text(out_dir / "chosen.toml", chosen_toml(outcomes))
    for outcome in outcomes:
        chosen = ", ".join(f"{k} = {display_value(v)}" for k, v in outcome.chosen.items())
        print(f"{outcome.search.target}: {chosen}  ({outcome.search.criterion.text} = "
              f"{display_value(outcome.chosen_value)})")
    print(f"written: {out_dir / 'results.md'}, {out_dir / 'results.json'}, {out_dir / 'chosen.toml'}")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``tune-claims`` with its flags to the ``fedhet`` sub-command parsers."""
    parser = subparsers.add_parser(
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
    add_lockstep_flag(parser, runs="trials of a grid")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """``fedhet tune-claims``: :func:`tune_claims_command` on the parsed flags."""
    command = "fedhet " + " ".join(sys.argv[1:]) if sys.argv[1:2] == ["tune-claims"] else "fedhet tune-claims"
    try:
        return tune_claims_command(args.plan, tier=args.tier, only=args.only.split(",") if args.only else None,
                                   out=args.out, jobs=args.jobs, dry_run=args.dry_run, command=command,
                                   lockstep=args.lockstep)
    except KeyboardInterrupt:
        print("fedhet: interrupted; run the same `fedhet tune-claims` command again to continue",
              file=sys.stderr)
        return 130

