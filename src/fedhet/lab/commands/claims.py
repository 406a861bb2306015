"""``fedhet claims list | run | report | export | rejudge | pilot``: the arguments, and each sub-action from
parsed command-line values to an exit code.

Tiers (docs/claims.md, "Tiers and the regime gate"): ``quick`` (minutes, below every regime: trends, no
verdict), ``default`` (the protocols' regime: verdicts) and ``full`` (the papers' lengths); each has its
own runs directory (:func:`default_out`) so that no tier's runs are mistaken for another's.

Exit codes (as ``fedhet sweep``): 0 success; 1 some run failed (the report still covers the others);
2 a claims, configuration or input error; 130 interrupted (run the same command again to resume).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Optional, TextIO

from fedhet.config import ConfigError
from fedhet.errors import FedhetError
from fedhet.lab.commands.executor_flags import add_executor_flags, add_lockstep_flag
from fedhet.lab.commands.shared import EXIT_FAILED_RUNS, EXIT_INPUT_ERROR, EXIT_OK, console_streams, run_plan, say

DEFAULT_CLAIMS_DIR = "configs/claims"


def default_claims_dir() -> str:
    """``--claims``'s default: ``configs/claims`` of the working directory when it has one (a
    checkout, or a user's own copy), else the claims shipped with fedhet (the checkout fedhet runs
    from, or the installed package: :func:`fedhet.presets.shipped_configs_dir`), so that ``fedhet
    claims`` works from a pip install."""
    from fedhet.lab.claims.definitions import PROTOCOLS_FILE
    from fedhet.presets import shipped_configs_dir

    if (Path(DEFAULT_CLAIMS_DIR) / PROTOCOLS_FILE).is_file():
        return DEFAULT_CLAIMS_DIR
    return str(shipped_configs_dir("claims"))


TIER_TEXT = {"quick": "quick tier: below the regime, trends only", "default": "default tier",
             "full": "full tier: the papers' lengths"}


def default_out(tier: str) -> str:
    """Where the runs go: ``runs/claims`` (default tier), ``runs/claims_quick``, ``runs/claims_full``."""
    return "runs/claims" if tier == "default" else f"runs/claims_{tier}"


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


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``claims`` and its sub-actions (list, run, report, export, rejudge, pilot) to the ``fedhet``
    sub-command parsers."""
    claims = subparsers.add_parser("claims", help="the papers' claims: run them and get a verdict per claim",
                                   description="Each claim compares methods of the papers' protocols over seeds; a "
                                               "claim gets a verdict only at or above its protocols' regime. The "
                                               "verdict rule is in docs/claims.md.")
    # One handler for every sub-action: run dispatches on args.claims_command.
    claims.set_defaults(handler=run)
    commands = claims.add_subparsers(dest="claims_command", required=True)
    listing = commands.add_parser("list", help="the claims, their protocols and run counts")
    _common(listing)
    run_parser = commands.add_parser("run", help="run what the claims need (resumable), then report the verdicts")
    _common(run_parser)
    run_parser.add_argument("--only", metavar="ID,...", help="only these claims (ids from `fedhet claims list`)")
    run_parser.add_argument("--out", metavar="DIR", help="directory of the runs (default: runs/claims, "
                                                          "runs/claims_quick or runs/claims_full)")
    run_parser.add_argument("--jobs", type=int, metavar="N", help="runs in parallel (default: one per usable core)")
    run_parser.add_argument("--overwrite", action="store_true",
                            help="rerun from scratch runs whose directory holds a different configuration")
    run_parser.add_argument("--dry-run", action="store_true", help="list the runs and their state; run nothing")
    run_parser.add_argument("--no-report", action="store_true",
                            help="run only; `fedhet claims report` writes the report")
    run_parser.add_argument("--backend", choices=RUN_BACKENDS, metavar="NAME",
                            help="run.backend of every run: the protocols' base files pin 'sequential' (one core "
                                 "per job); on a CUDA GPU 'auto' trains each cohort vectorised "
                                 "(docs/claims.md, \"Cost\")")
    add_executor_flags(run_parser, default="local; docs/experiments.md, \"Sweeps on a Ray cluster\"")
    add_lockstep_flag(run_parser)
    report = commands.add_parser("report", help="verdicts, claims table and HTML report from the runs so far")
    _common(report)
    report.add_argument("--only", metavar="ID,...", help="only these claims")
    report.add_argument("--out", metavar="DIR",
                        help="directory of the runs (default: runs/claims, runs/claims_quick or runs/claims_full)")
    report.add_argument("--report-dir", metavar="DIR", help="where to write the report (default: OUT/report)")
    export = commands.add_parser("export", help="write every planned run's resolved config.toml; run nothing",
                                 description="One directory per run, OUT/<protocol>/<run name>/config.toml, named "
                                             "as `claims run` names them; each runs on its own with `fedhet run`.")
    _common(export)
    export.add_argument("--only", metavar="ID,...", help="only these claims")
    export.add_argument("--out", metavar="DIR", required=True, help="where to write the run directories")
    rejudge = commands.add_parser("rejudge", help="judge a claims.json record again under the current rule; run nothing",
                                  description="Recompute every comparison's interval, outcome and each claim's "
                                              "verdict from the per-seed values a claims.json keeps, and print them "
                                              "beside the recorded ones (docs/claims.md, \"History\").")
    rejudge.add_argument("record", metavar="CLAIMS_JSON", help="a claims.json written by `fedhet claims report`")
    rejudge.add_argument("--out", metavar="FILE", help="write the record judged again here (JSON)")
    pilot = commands.add_parser("pilot", help="the FedSpeed claim's late target and rounds deltas from pilot runs",
                                description="Reads each pilot run's validation accuracy (never the test set) and "
                                            "prints the target (0.99 x the best last-10%% validation accuracy, "
                                            "rounded down to 0.1 point) and each method's delta (10%% of its "
                                            "rounds to the target); configs/claims/4_fedspeed_dir06.toml.")
    pilot.add_argument("runs", nargs="+", metavar="METHOD=RUN_DIR", help="one finished pilot run per method")


def run(args: argparse.Namespace) -> int:
    """``fedhet claims ACTION``: the sub-action's command on the parsed flags."""
    return _ACTIONS[args.claims_command](args)


def _list(args: argparse.Namespace) -> int:
    return list_command(claims_dir=args.claims, tier=args.tier)


def _run(args: argparse.Namespace) -> int:
    return run_command(claims_dir=args.claims, only=args.only, tier=args.tier, out=args.out, jobs=args.jobs,
                       overwrite=args.overwrite, dry_run=args.dry_run, report=not args.no_report,
                       executor=args.executor, ray_address=args.ray_address, ray_cpus_per_run=args.ray_cpus_per_run,
                       ray_gpus_per_run=args.ray_gpus_per_run, backend=args.backend, lockstep=args.lockstep)


def _report(args: argparse.Namespace) -> int:
    return report_command(claims_dir=args.claims, only=args.only, tier=args.tier, out=args.out,
                          report_dir=args.report_dir)


def _export(args: argparse.Namespace) -> int:
    return export_command(claims_dir=args.claims, only=args.only, tier=args.tier, out=args.out)


def _rejudge(args: argparse.Namespace) -> int:
    return rejudge_command(record=args.record, out=args.out)


def _pilot(args: argparse.Namespace) -> int:
    return pilot_command(runs=args.runs)


_ACTIONS = {"list": _list, "run": _run, "report": _report, "export": _export, "rejudge": _rejudge, "pilot": _pilot}


def _selection(only: Optional[str]) -> Optional[list[str]]:
    return [part.strip() for part in only.split(",") if part.strip()] if only else None


def list_command(*, claims_dir: Optional[str] = None, tier: str = "default", stdout: Optional[TextIO] = None,
                 stderr: Optional[TextIO] = None) -> int:
    from fedhet.lab.claims.definitions import check_tier, load_suite
    from fedhet.lab.claims.evaluate import claim_gaps
    from fedhet.lab.claims.planning import plan_claims, regime_gaps

    stdout, stderr = console_streams(stdout, stderr)
    try:
        suite = load_suite(claims_dir or default_claims_dir())
        plan = plan_claims(suite, suite.claims, default_out(check_tier(tier)), tier=tier)
        gaps = regime_gaps(suite, plan, tier=tier)
    except (FedhetError, ConfigError) as error:
        say(f"fedhet claims: {error}", stderr)
        return EXIT_INPUT_ERROR
    for claim in suite.claims:
        primary = sum(c.primary for c in claim.comparisons)
        say(f"{claim.id}  [{claim.paper}, {claim.source}]", stdout)
        say(f"    {claim.statement}", stdout)
        say(f"    comparisons: {primary} primary ({claim.quantifier}), {len(claim.comparisons) - primary} reported; "
            f"protocols: {', '.join(claim.protocols)}", stdout)
        reasons = list(dict.fromkeys(item.rsplit(" (", 1)[0] for item in claim_gaps(claim, gaps)))
        if reasons:
            say(f"    below regime in this tier (no verdict): {'; '.join(reasons)}", stdout)
    say(f"\n{len(suite.claims)} claims, {len(plan.runs)} runs ({TIER_TEXT[tier]}) over "
        f"{len(suite.needed_methods(suite.claims))} protocols", stdout)
    for name, methods in suite.needed_methods(suite.claims).items():
        protocol = suite.protocols[name]
        say(f"  {name}: {len(methods)} methods x {len(protocol.run_seeds(tier=tier))} seeds; {protocol.title}",
            stdout)
    return EXIT_OK


def _plan(claims_dir: Optional[str], only: Optional[str], tier: str, out_dir: str):
    from fedhet.lab.claims.definitions import check_tier, load_suite
    from fedhet.lab.claims.planning import plan_claims

    suite = load_suite(claims_dir or default_claims_dir())
    claims = suite.select(_selection(only))
    return suite, claims, plan_claims(suite, claims, out_dir, tier=check_tier(tier))


def export_command(*, out: str, claims_dir: Optional[str] = None, only: Optional[str] = None,
                   tier: str = "default", stdout: Optional[TextIO] = None, stderr: Optional[TextIO] = None) -> int:
    """Write each planned run's resolved ``config.toml`` into ``OUT/<protocol>/<run name>/``, the layout
    ``claims run`` uses, without running anything (so the runs can be inspected, or run elsewhere with
    ``fedhet run OUT/<protocol>/<run>/config.toml``)."""
    from fedhet.config import config_to_toml
    from fedhet.core import atomic_write_text
    from fedhet.lab.claims.planning import protocol_of

    stdout, stderr = console_streams(stdout, stderr)
    try:
        _suite, claims, plan = _plan(claims_dir, only, tier, out)
    except (FedhetError, ConfigError) as error:
        say(f"fedhet claims: {error}", stderr)
        return EXIT_INPUT_ERROR
    from fedhet.engine import DirectoryLock

    # The --out lock: a live `claims run` (or sweep) there holds it, and its runs' configurations
    # must not change under it. A run directory that already holds another config.toml (a finished
    # or interrupted run of another tier) is refused before anything is written: overwriting it
    # would make the run unresumable and `claims run` refuse it.
    with DirectoryLock(out, what="claims directory"):
        texts = [(Path(out) / protocol_of(run) / run.name / "config.toml", config_to_toml(run.config))
                 for run in plan.runs]
        differing = [path for path, text in texts if _existing_text(path) not in (None, text)]
        if differing:
            say(f"fedhet claims: {differing[0]} already holds a different configuration"
                f"{f' (and {len(differing) - 1} more runs)' if len(differing) > 1 else ''}; export into "
                "another --out directory (existing runs' config.toml are never overwritten)", stderr)
            return EXIT_INPUT_ERROR
        for path, text in texts:
            if _existing_text(path) != text:
                atomic_write_text(path, text)
    say(f"fedhet claims: {len(plan.runs)} run configurations of {len(claims)} claims ({TIER_TEXT[tier]}) "
        f"written under {out}/<protocol>/<run>/config.toml; nothing was run", stdout)
    return EXIT_OK


def _existing_text(path: Path) -> Optional[str]:
    """The text of a run's ``config.toml``, None when there is none (a FIFO or device is not read)."""
    from fedhet.core import NotAPlainFileError, read_small_file

    try:
        return read_small_file(path).decode("utf-8", errors="replace")
    except FileNotFoundError:
        return None
    except NotAPlainFileError:
        return "<not a regular file>"


def run_command(*, claims_dir: Optional[str] = None, only: Optional[str] = None, tier: str = "default",
                out: Optional[str] = None, jobs: Optional[int] = None, overwrite: bool = False,
                dry_run: bool = False, report: bool = True, executor: Optional[str] = None,
                ray_address: Optional[str] = None, ray_cpus_per_run: Optional[float] = None,
                ray_gpus_per_run: Optional[float] = None, backend: Optional[str] = None,
                lockstep: Optional[str] = None, stdout: Optional[TextIO] = None,
                stderr: Optional[TextIO] = None) -> int:
    """Run every run the selected claims need (skipping finished ones), then write and print the report.
    ``executor`` (``local`` / ``ray``) and the ``ray_*`` values choose how the runs execute, as
    ``fedhet sweep``'s flags (:mod:`fedhet.lab.sweep.options`); they never change a run's result. ``backend``
    replaces every run's ``run.backend`` (the base files' ``sequential``); ``vectorized`` gives the same
    numbers to rounding, so a finished run made with another backend counts as a different configuration.
    ``lockstep`` (``off`` / ``on`` / ``auto``, default ``auto``: on a CUDA device only) trains the runs that
    share a model and local solver together (``fedhet sweep --lockstep``; docs/claims.md, "Cost"); a run's
    configuration, directory and numbers to rounding are its own either way."""
    from fedhet.lab.claims.planning import with_backend
    from fedhet.lab.sweep.options import sweep_options

    stdout, stderr = console_streams(stdout, stderr)
    started = time.monotonic()
    try:
        options = sweep_options(None, {"executor": executor, "ray_address": ray_address,
                                       "ray_cpus_per_run": ray_cpus_per_run, "ray_gpus_per_run": ray_gpus_per_run,
                                       "lockstep": lockstep})
        out_dir = out or default_out(tier)
        _suite, claims, plan = _plan(claims_dir, only, tier, out_dir)
        if backend is not None:
            plan = with_backend(plan, backend)
    except (FedhetError, ConfigError) as error:
        say(f"fedhet claims: {error}", stderr)
        return EXIT_INPUT_ERROR
    say(f"fedhet claims: {len(claims)} claims, {len(plan.runs)} runs in {out_dir} ({TIER_TEXT[tier]})", stderr)
    if backend is None and options.lockstep == "off" and gpu_present():
        say("fedhet claims: a CUDA GPU is present and the protocols pin run.backend = sequential (one client at "
            "a time); --backend auto trains each cohort vectorised, 1.5-2.6x faster a run on an H200 "
            "(docs/claims.md, \"Cost\")", stderr)
    result = run_plan(plan, command="fedhet claims", dry_run=dry_run, jobs=jobs, overwrite=overwrite,
                      stdout=stdout, stderr=stderr, options=options, label=lambda run: run.run_dir)
    if isinstance(result, int):
        return result
    failed = result.failed
    say(f"fedhet claims: {len(result.ran)} ran, {len(plan.runs) - len(result.ran) - len(failed)} already "
        f"finished, {len(failed)} failed, {time.monotonic() - started:.0f} s", stderr)
    for outcome in failed:
        say(f"failed: {outcome.run.name}: {outcome.error}", stderr)
    status = EXIT_FAILED_RUNS if failed else EXIT_OK
    if report:
        report_status = report_command(claims_dir=claims_dir, only=only, tier=tier, out=out_dir, stdout=stdout,
                                       stderr=stderr)
        status = report_status if report_status != EXIT_OK else status
    return status


def gpu_present() -> bool:
    """Whether ``run.device = "auto"`` (every protocol's) would put a run on a CUDA GPU."""
    from fedhet.engine import resolve_device

    return resolve_device("auto").type == "cuda"


def report_command(*, claims_dir: Optional[str] = None, only: Optional[str] = None, tier: str = "default",
                   out: Optional[str] = None, report_dir: Optional[str] = None, stdout: Optional[TextIO] = None,
                   stderr: Optional[TextIO] = None) -> int:
    """Read the claims' runs, compute the verdicts, write ``claims.md``, ``claims.json`` and ``report.html``
    into ``report_dir`` (default ``OUT/report``) and print the claims table."""
    from fedhet.lab.claims.definitions import check_tier, load_suite
    from fedhet.lab.claims.evaluate import evaluate_claims
    from fedhet.lab.claims.render import console_table
    from fedhet.lab.claims.report import write_claims_report
    from fedhet.lab.report.runs import RunDirectoryError

    stdout, stderr = console_streams(stdout, stderr)
    warnings: list[str] = []
    try:
        out_dir = Path(out or default_out(check_tier(tier)))
        suite = load_suite(claims_dir or default_claims_dir())
        claims = suite.select(_selection(only))
        results = evaluate_claims(suite, claims, out_dir, tier=tier, warn=warnings.append)
        files = write_claims_report(suite, results, out_dir, Path(report_dir) if report_dir else out_dir / "report",
                                    tier=tier, warnings=warnings)
    except (FedhetError, ConfigError, RunDirectoryError) as error:
        say(f"fedhet claims: {error}", stderr)
        return EXIT_INPUT_ERROR
    for warning in warnings:
        say(f"fedhet claims: warning: {warning}", stderr)
    say(console_table(results, tier=tier), stdout)
    say(f"Markdown: {files.markdown}", stdout)
    say(f"JSON:     {files.json}", stdout)
    say(f"HTML:     {files.html.resolve()}", stdout)
    return EXIT_OK


def rejudge_command(*, record: str, out: Optional[str] = None, stdout: Optional[TextIO] = None,
                    stderr: Optional[TextIO] = None) -> int:
    """Judge a ``claims.json`` record again under the current rule (:mod:`fedhet.lab.claims.rejudge`): print each
    comparison's and claim's recorded and new outcome; with ``out``, write the new record there."""
    import json

    from fedhet.core import atomic_write_json
    from fedhet.lab.claims.rejudge import rejudge
    from fedhet.lab.claims.render import rejudge_table, results_json

    stdout, stderr = console_streams(stdout, stderr)
    try:
        try:
            recorded = json.loads(Path(record).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise FedhetError(f"{record}: cannot read a claims.json record ({error})") from None
        results = rejudge(recorded, record)
        rejudged = results_json(results, tier=recorded.get("tier", "default"), out_dir=recorded.get("runs", ""))
        if out:
            atomic_write_json(out, rejudged)
    except FedhetError as error:
        say(f"fedhet claims: {error}", stderr)
        return EXIT_INPUT_ERROR
    say(rejudge_table(recorded, rejudged), stdout)
    if out:
        say(f"JSON: {out}", stdout)
    return EXIT_OK


def pilot_command(*, runs: list[str], stdout: Optional[TextIO] = None, stderr: Optional[TextIO] = None) -> int:
    """The FedSpeed claim's pilot (:mod:`fedhet.lab.claims.pilot`) from ``METHOD=RUN_DIR`` pairs: print the late
    target and each method's delta as the claim file's keys."""
    from fedhet.config import load_config
    from fedhet.engine import read_metrics
    from fedhet.lab.claims.pilot import pilot

    stdout, stderr = console_streams(stdout, stderr)
    try:
        records, horizons = {}, set()
        for item in runs:
            method, separator, directory = item.partition("=")
            if not separator or not method or not directory:
                raise FedhetError(f"{item!r}: write METHOD=RUN_DIR, e.g. fedavg=runs/pilot/fedavg")
            run_dir = Path(directory)
            if not (run_dir / "metrics.jsonl").is_file() or not (run_dir / "config.toml").is_file():
                raise FedhetError(f"{run_dir}: not a run directory (no metrics.jsonl and config.toml)")
            horizons.add(load_config(run_dir / "config.toml").run.rounds)
            records[method] = read_metrics(run_dir / "metrics.jsonl")
        if len(horizons) != 1:
            raise FedhetError(f"the pilot runs have different horizons {sorted(horizons)}; they must share T")
        result = pilot(records, horizons.pop())
    except (FedhetError, ConfigError, ValueError) as error:
        say(f"fedhet claims: {error}", stderr)
        return EXIT_INPUT_ERROR
    say(f"target = {result.target:g}    # 0.99 x {result.best_method}'s last-10% validation accuracy "
        f"{result.last10[result.best_method]:.4f}, rounded down to 0.1 point", stdout)
    for method, delta in result.deltas.items():
        reached = result.rounds[method]
        say(f"{method}: delta = {delta}    # reached the target at round "
            f"{reached if reached is not None else 'never (T + 1)'}", stdout)
    return EXIT_OK
