"""The ``fedhet claims`` sub-commands' argument parsers (wired into :mod:`fedhet.cli`)."""
from __future__ import annotations

import argparse

from fedhet.lab.claims.commands import DEFAULT_CLAIMS_DIR
from fedhet.lab.sweep.executor_flags import add_executor_flags

TIER_CHOICES = ("quick", "default", "full")
# The backends a sweep job can use (processes would fork inside every job; ray is the executor's business).
RUN_BACKENDS = ("auto", "sequential", "vectorized")


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--claims", metavar="DIR",
                        help=f"directory of protocols.toml and the claim files (default: {DEFAULT_CLAIMS_DIR} "
                             "here when it exists, else the claims shipped with fedhet)")
    tiers = parser.add_mutually_exclusive_group()
    tiers.add_argument("--tier", choices=TIER_CHOICES, default="default",
                       help="quick: minutes, below the protocols' regime (trends, no verdict; runs/claims_quick); "
                            "default: the regime, verdicts (runs/claims); full: the papers' lengths "
                            "(runs/claims_full). docs/claims.md, \"Tiers and the regime gate\"")
    tiers.add_argument("--full", dest="tier", action="store_const", const="full", help="the same as --tier full")


def _list(args: argparse.Namespace) -> int:
    from fedhet.lab.claims.commands import list_command

    return list_command(claims_dir=args.claims, tier=args.tier)


def _run(args: argparse.Namespace) -> int:
    from fedhet.lab.claims.commands import run_command

    return run_command(claims_dir=args.claims, only=args.only, tier=args.tier, out=args.out, jobs=args.jobs,
                       overwrite=args.overwrite, dry_run=args.dry_run, report=not args.no_report,
                       executor=args.executor, ray_address=args.ray_address, ray_cpus_per_run=args.ray_cpus_per_run,
                       ray_gpus_per_run=args.ray_gpus_per_run, backend=args.backend)


def _report(args: argparse.Namespace) -> int:
    from fedhet.lab.claims.commands import report_command

    return report_command(claims_dir=args.claims, only=args.only, tier=args.tier, out=args.out,
                          report_dir=args.report_dir)


def _export(args: argparse.Namespace) -> int:
    from fedhet.lab.claims.commands import export_command

    return export_command(claims_dir=args.claims, only=args.only, tier=args.tier, out=args.out)


def _rejudge(args: argparse.Namespace) -> int:
    from fedhet.lab.claims.commands import rejudge_command

    return rejudge_command(record=args.record, out=args.out)


def _pilot(args: argparse.Namespace) -> int:
    from fedhet.lab.claims.commands import pilot_command

    return pilot_command(runs=args.runs)


def add_claims_command(sub) -> None:
    """Add ``claims {list,run,report,export}`` to the ``fedhet`` sub-command parsers ``sub``."""
    claims = sub.add_parser("claims", help="the papers' claims: run them and get a verdict per claim",
                            description="Each claim compares methods of the papers' protocols over seeds; a claim "
                                        "gets a verdict only at or above its protocols' regime. The verdict rule "
                                        "is in docs/claims.md.")
    commands = claims.add_subparsers(dest="claims_command", required=True)
    listing = commands.add_parser("list", help="the claims, their protocols and run counts")
    _common(listing)
    listing.set_defaults(handler=_list)
    run = commands.add_parser("run", help="run what the claims need (resumable), then report the verdicts")
    _common(run)
    run.add_argument("--only", metavar="ID,...", help="only these claims (ids from `fedhet claims list`)")
    run.add_argument("--out", metavar="DIR",
                     help="directory of the runs (default: runs/claims, runs/claims_quick or runs/claims_full)")
    run.add_argument("--jobs", type=int, metavar="N", help="runs in parallel (default: one per usable core)")
    run.add_argument("--overwrite", action="store_true",
                     help="rerun from scratch runs whose directory holds a different configuration")
    run.add_argument("--dry-run", action="store_true", help="list the runs and their state; run nothing")
    run.add_argument("--no-report", action="store_true", help="run only; `fedhet claims report` writes the report")
    run.add_argument("--backend", choices=RUN_BACKENDS, metavar="NAME",
                     help="run.backend of every run: the protocols' base files pin 'sequential' (one core per "
                          "job); on a CUDA GPU 'auto' trains each cohort vectorised (docs/claims.md, \"Cost\")")
    add_executor_flags(run, default="local; docs/experiments.md, \"Sweeps on a Ray cluster\"")
    run.set_defaults(handler=_run)
    report = commands.add_parser("report", help="verdicts, claims table and HTML report from the runs so far")
    _common(report)
    report.add_argument("--only", metavar="ID,...", help="only these claims")
    report.add_argument("--out", metavar="DIR",
                        help="directory of the runs (default: runs/claims, runs/claims_quick or runs/claims_full)")
    report.add_argument("--report-dir", metavar="DIR", help="where to write the report (default: OUT/report)")
    report.set_defaults(handler=_report)
    export = commands.add_parser("export", help="write every planned run's resolved config.toml; run nothing",
                                 description="One directory per run, OUT/<protocol>/<run name>/config.toml, named "
                                             "as `claims run` names them; each runs on its own with `fedhet run`.")
    _common(export)
    export.add_argument("--only", metavar="ID,...", help="only these claims")
    export.add_argument("--out", metavar="DIR", required=True, help="where to write the run directories")
    export.set_defaults(handler=_export)
    rejudge = commands.add_parser("rejudge", help="judge a claims.json record again under the current rule; run nothing",
                                  description="Recompute every comparison's interval, outcome and each claim's "
                                              "verdict from the per-seed values a claims.json keeps, and print them "
                                              "beside the recorded ones (docs/claims.md, \"History\").")
    rejudge.add_argument("record", metavar="CLAIMS_JSON", help="a claims.json written by `fedhet claims report`")
    rejudge.add_argument("--out", metavar="FILE", help="write the record judged again here (JSON)")
    rejudge.set_defaults(handler=_rejudge)
    pilot = commands.add_parser("pilot", help="the FedSpeed claim's late target and rounds deltas from pilot runs",
                                description="Reads each pilot run's validation accuracy (never the test set) and "
                                            "prints the target (0.99 x the best last-10%% validation accuracy, "
                                            "rounded down to 0.1 point) and each method's delta (10%% of its "
                                            "rounds to the target); configs/claims/4_fedspeed_dir06.toml.")
    pilot.add_argument("runs", nargs="+", metavar="METHOD=RUN_DIR", help="one finished pilot run per method")
    pilot.set_defaults(handler=_pilot)
