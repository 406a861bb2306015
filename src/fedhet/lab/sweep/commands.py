"""The ``fedhet sweep`` command, from parsed command-line values to exit codes, and :func:`run_plan`,
which ``fedhet claims run`` shares.

Exit codes (``fedhet report`` and ``fedhet claims`` use them too): 0 success; 1 some sweep run failed;
2 a configuration or input error (the message names what is wrong and what is allowed); 130 interrupted.
"""
from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, TextIO, cast

from fedhet.config import ConfigError

EXIT_OK, EXIT_FAILED_RUNS, EXIT_INPUT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130


def _print(message: str, stream: TextIO) -> None:
    print(message, file=stream, flush=True)


def console_streams(stdout: Optional[TextIO], stderr: Optional[TextIO]) -> tuple[TextIO, TextIO]:
    """A command's output streams: the ones given (tests pass buffers), else the process's own."""
    return stdout or sys.stdout, stderr or sys.stderr


def sweep_command(config: str, *, grids: Sequence[str] = (), seeds: Optional[str] = None,
                  variants: Optional[str] = None, only: Optional[str] = None, sets: Sequence[str] = (),
                  out: Optional[str] = None, jobs: Optional[int] = None, skip_missing: bool = False,
                  overwrite: bool = False, dry_run: bool = False, executor: Optional[str] = None,
                  ray_address: Optional[str] = None, ray_cpus_per_run: Optional[float] = None,
                  ray_gpus_per_run: Optional[float] = None, ray_transfer: Optional[str] = None,
                  ray_max_attempts: Optional[int] = None, quiet: bool = False, stdout: Optional[TextIO] = None,
                  stderr: Optional[TextIO] = None) -> int:
    """``executor`` and the ``ray_*`` values override the base file's ``[sweep]`` table
    (:mod:`fedhet.lab.sweep.options`); None leaves the table's value. ``quiet``: no progress
    view and no status lines, only errors, left-out settings and failed runs."""
    from fedhet.config import options_to_dict
    from fedhet.lab.sweep.grid import SweepError, load_variants, parse_grid, parse_seeds, select_variants
    from fedhet.lab.sweep.options import sweep_options
    from fedhet.lab.sweep.plan import plan_sweep

    stdout, stderr = console_streams(stdout, stderr)
    try:
        axes = [parse_grid(text) for text in grids]
        seed_list = parse_seeds(seeds) if seeds else None
        variant_list = load_variants(variants) if variants else []
        if only is not None:
            if not variants:
                raise ConfigError("--only", only, "selects variants: give --variants FILE too")
            variant_list = select_variants(variant_list, [name.strip() for name in only.split(",") if name.strip()])
        plan = plan_sweep(config, grids=axes, seeds=seed_list, variants=variant_list, sets=sets, out_dir=out,
                          skip_missing=skip_missing)
        options = sweep_options(options_to_dict(plan.options), {
            "executor": executor, "ray_address": ray_address, "ray_cpus_per_run": ray_cpus_per_run,
            "ray_gpus_per_run": ray_gpus_per_run, "ray_transfer": ray_transfer, "ray_max_attempts": ray_max_attempts})
    except (ConfigError, SweepError) as error:
        _print(f"fedhet sweep: {error}", stderr)
        return EXIT_INPUT_ERROR
    from fedhet.lab.sweep.plan import dropped_options_line

    dropped_line = dropped_options_line(plan.dropped)
    if dropped_line:
        _print(f"fedhet sweep: {dropped_line}", stderr)
    for skipped in plan.skipped:
        _print(f"fedhet sweep: not run (missing component or option): {skipped.name}: {skipped.reason}", stderr)
    if not plan.runs:
        _print("fedhet sweep: nothing to run (every setting was left out)", stderr)
        return EXIT_INPUT_ERROR
    count = len(plan.runs)
    # --quiet: the progress view and the status lines go nowhere; errors and failures still print.
    # _NullStream has every method the progress view and _print call (write, flush, isatty).
    status = cast(TextIO, _NullStream()) if quiet else stderr
    _print(f"fedhet sweep: {count} runs in {plan.out_dir}", status)
    result = run_plan(plan, command="fedhet sweep", dry_run=dry_run, jobs=jobs, overwrite=overwrite,
                      stdout=stdout, stderr=stderr, options=options, progress=status)
    if isinstance(result, int):
        return result
    ran, failed = len(result.ran), result.failed
    skipped_count = count - ran - len(failed)
    _print(f"fedhet sweep: {ran} ran, {skipped_count} already finished, {len(failed)} failed; "
           f"runs in {plan.out_dir}", stderr if failed else status)
    for outcome in failed:
        _print(f"failed: {outcome.run.name}: {outcome.error}", stderr)
    _print(f"report:  {report_hint(plan.out_dir)}", status)
    from fedhet.engine import sweep_viewer_lines

    for line in sweep_viewer_lines([(run.config.run.name, run.seed, run.run_dir) for run in plan.runs]):
        _print(f"view:    {line}", status)
    return EXIT_FAILED_RUNS if failed else EXIT_OK


def report_hint(out_dir: str | Path) -> str:
    """The ``fedhet report`` command for a sweep's directory, each path quoted for the shell so that
    pasting it runs nothing a directory's name holds (``$(...)``, ``;``, spaces)."""
    return f"fedhet report {shlex.quote(str(out_dir))} --out {shlex.quote(str(Path(out_dir) / 'report'))}"


class _NullStream:
    """Where ``--quiet`` sends the progress view (a log-file-like stream that drops everything)."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def run_plan(plan: Any, *, command: str, dry_run: bool, jobs: Optional[int], overwrite: bool, stdout: TextIO,
             stderr: TextIO, options: Any = None, label: Callable[[Any], Any] = lambda run: run.name,
             progress: Optional[TextIO] = None) -> Any:
    """The part ``fedhet sweep`` and ``fedhet claims run`` share once a plan is made: with ``dry_run``
    each run's state (``label(run)`` names it) and :data:`EXIT_OK`; otherwise the sweep's
    ``SweepResult``, or an exit code after a one-line ``command: ...`` message when it stopped
    (a sweep error, or Ctrl-C: run the same command again to resume). The progress view goes to
    ``progress`` (default ``stderr``)."""
    from fedhet.lab.sweep.execute import run_sweep
    from fedhet.lab.sweep.grid import SweepError
    from fedhet.lab.sweep.plan import run_state

    if dry_run:
        for run in plan.runs:
            state, conflict = run_state(run)
            _print(f"{state:<8} {label(run)}" + (f"  (conflict: {conflict})" if conflict else ""), stdout)
        return EXIT_OK
    try:
        return run_sweep(plan, jobs=jobs, overwrite=overwrite, stream=progress or stderr, options=options)
    except SweepError as error:
        _print(f"{command}: {error}", stderr)
        return EXIT_INPUT_ERROR
    except KeyboardInterrupt:
        _print(f"{command}: interrupted; run the same command again to resume", stderr)
        return EXIT_INTERRUPTED
