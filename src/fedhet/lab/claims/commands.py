"""``fedhet claims list | run | report | export | rejudge``: from parsed command-line values to exit codes.

Tiers (docs/claims.md, "Tiers and the regime gate"): ``quick`` (minutes, below every regime: trends, no
verdict), ``default`` (the protocols' regime: verdicts) and ``full`` (the papers' lengths); each has its
own runs directory (:func:`default_out`) so that no tier's runs are mistaken for another's.

Exit codes (as ``fedhet sweep``): 0 success; 1 some run failed (the report still covers the others);
2 a claims, configuration or input error; 130 interrupted (run the same command again to resume).
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Optional, TextIO

from fedhet.config import ConfigError
from fedhet.errors import FedhetError
from fedhet.lab.sweep.commands import EXIT_FAILED_RUNS, EXIT_INPUT_ERROR, EXIT_OK, console_streams, run_plan

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


def _print(message: str, stream: TextIO) -> None:
    print(message, file=stream, flush=True)


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
        _print(f"fedhet claims: {error}", stderr)
        return EXIT_INPUT_ERROR
    for claim in suite.claims:
        primary = sum(c.primary for c in claim.comparisons)
        _print(f"{claim.id}  [{claim.paper}, {claim.source}]", stdout)
        _print(f"    {claim.statement}", stdout)
        _print(f"    comparisons: {primary} primary ({claim.quantifier}), {len(claim.comparisons) - primary} reported; "
               f"protocols: {', '.join(claim.protocols)}", stdout)
        reasons = list(dict.fromkeys(item.rsplit(" (", 1)[0] for item in claim_gaps(claim, gaps)))
        if reasons:
            _print(f"    below regime in this tier (no verdict): {'; '.join(reasons)}", stdout)
    _print(f"\n{len(suite.claims)} claims, {len(plan.runs)} runs ({TIER_TEXT[tier]}) over "
           f"{len(suite.needed_methods(suite.claims))} protocols", stdout)
    for name, methods in suite.needed_methods(suite.claims).items():
        protocol = suite.protocols[name]
        _print(f"  {name}: {len(methods)} methods x {len(protocol.run_seeds(tier=tier))} seeds; {protocol.title}",
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
        _print(f"fedhet claims: {error}", stderr)
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
            _print(f"fedhet claims: {differing[0]} already holds a different configuration"
                   f"{f' (and {len(differing) - 1} more runs)' if len(differing) > 1 else ''}; export into "
                   "another --out directory (existing runs' config.toml are never overwritten)", stderr)
            return EXIT_INPUT_ERROR
        for path, text in texts:
            if _existing_text(path) != text:
                atomic_write_text(path, text)
    _print(f"fedhet claims: {len(plan.runs)} run configurations of {len(claims)} claims ({TIER_TEXT[tier]}) "
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
                stdout: Optional[TextIO] = None, stderr: Optional[TextIO] = None) -> int:
    """Run every run the selected claims need (skipping finished ones), then write and print the report.
    ``executor`` (``local`` / ``ray``) and the ``ray_*`` values choose how the runs execute, as
    ``fedhet sweep``'s flags (:mod:`fedhet.lab.sweep.options`); they never change a run's result. ``backend``
    replaces every run's ``run.backend`` (the base files' ``sequential``); ``vectorized`` gives the same
    numbers to rounding, so a finished run made with another backend counts as a different configuration."""
    from fedhet.lab.sweep.options import sweep_options

    stdout, stderr = console_streams(stdout, stderr)
    started = time.monotonic()
    try:
        out_dir = out or default_out(tier)
        _suite, claims, plan = _plan(claims_dir, only, tier, out_dir)
        if backend is not None:
            plan = with_backend(plan, backend)
        options = sweep_options(None, {"executor": executor, "ray_address": ray_address,
                                       "ray_cpus_per_run": ray_cpus_per_run, "ray_gpus_per_run": ray_gpus_per_run})
    except (FedhetError, ConfigError) as error:
        _print(f"fedhet claims: {error}", stderr)
        return EXIT_INPUT_ERROR
    _print(f"fedhet claims: {len(claims)} claims, {len(plan.runs)} runs in {out_dir} ({TIER_TEXT[tier]})", stderr)
    if backend is None and gpu_present():
        _print("fedhet claims: a CUDA GPU is present and the protocols pin run.backend = sequential (one client at "
               "a time); --backend auto trains each cohort vectorised, 1.5-2.6x faster a run on an H200 "
               "(docs/claims.md, \"Cost\")", stderr)
    result = run_plan(plan, command="fedhet claims", dry_run=dry_run, jobs=jobs, overwrite=overwrite,
                      stdout=stdout, stderr=stderr, options=options, label=lambda run: run.run_dir)
    if isinstance(result, int):
        return result
    failed = result.failed
    _print(f"fedhet claims: {len(result.ran)} ran, {len(plan.runs) - len(result.ran) - len(failed)} already "
           f"finished, {len(failed)} failed, {time.monotonic() - started:.0f} s", stderr)
    for outcome in failed:
        _print(f"failed: {outcome.run.name}: {outcome.error}", stderr)
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


def with_backend(plan, backend: str):
    """``plan`` with ``run.backend = backend`` in every run's configuration."""
    runs = tuple(dataclasses.replace(run, config=run.config.with_overrides({"run.backend": backend}))
                 for run in plan.runs)
    return dataclasses.replace(plan, runs=runs)


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
        _print(f"fedhet claims: {error}", stderr)
        return EXIT_INPUT_ERROR
    for warning in warnings:
        _print(f"fedhet claims: warning: {warning}", stderr)
    _print(console_table(results, tier=tier), stdout)
    _print(f"Markdown: {files.markdown}", stdout)
    _print(f"JSON:     {files.json}", stdout)
    _print(f"HTML:     {files.html.resolve()}", stdout)
    return EXIT_OK


def rejudge_command(*, record: str, out: Optional[str] = None, stdout: Optional[TextIO] = None,
                    stderr: Optional[TextIO] = None) -> int:
    """Judge a ``claims.json`` record again under the current rule (:mod:`fedhet.lab.claims.rejudge`): print each
    comparison's and claim's recorded and new outcome; with ``out``, write the new record there."""
    import json

    from fedhet.core import atomic_write_json
    from fedhet.lab.claims.rejudge import rejudge
    from fedhet.lab.claims.render import results_json

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
        _print(f"fedhet claims: {error}", stderr)
        return EXIT_INPUT_ERROR
    _print(rejudge_table(recorded, rejudged), stdout)
    if out:
        _print(f"JSON: {out}", stdout)
    return EXIT_OK


def rejudge_table(recorded: dict, rejudged: dict) -> str:
    """Markdown: every claim and comparison with its recorded and its new outcome side by side."""
    from fedhet.lab.claims.render import markdown_table, metric_scale

    rows = []
    for old, new in zip(recorded["claims"], rejudged["claims"]):
        rows.append([f"**{new['id']}** ({new['quantifier']})", "", "", f"**{old['verdict']}**", f"**{new['verdict']}**"])
        for before, after in zip(old["comparisons"], new["comparisons"]):
            d, scale = after["difference"], metric_scale(after["metric"])
            interval = ("–" if d["low"] is None else
                        f"{scale * d['mean']:+.2f} [{scale * d['low']:+.2f}, {scale * d['high']:+.2f}]")
            adjusted = after.get("adjusted")
            if adjusted and adjusted["low"] is not None:
                interval += f"; adj. [{scale * adjusted['low']:+.2f}, {scale * adjusted['high']:+.2f}]"
            role = ("duplicate" if after.get("duplicate_of") else after["role"])
            rows.append([f"{after['method']} vs {after['baseline']} ({after['metric']})", role, interval,
                         before["verdict"], after["verdict"]])
    return markdown_table(("claim / comparison", "role", "difference [95% CI] (as measured)", "recorded",
                           "current rule"), rows)


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
        _print(f"fedhet claims: {error}", stderr)
        return EXIT_INPUT_ERROR
    _print(f"target = {result.target:g}    # 0.99 x {result.best_method}'s last-10% validation accuracy "
           f"{result.last10[result.best_method]:.4f}, rounded down to 0.1 point", stdout)
    for method, delta in result.deltas.items():
        reached = result.rounds[method]
        _print(f"{method}: delta = {delta}    # reached the target at round "
               f"{reached if reached is not None else 'never (T + 1)'}", stdout)
    return EXIT_OK
