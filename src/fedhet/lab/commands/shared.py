"""What the lab's verbs share: their exit codes, their output streams and :func:`run_plan`, the part
``fedhet sweep`` and ``fedhet claims run`` have in common once a plan is made.

Exit codes (``fedhet sweep``, ``fedhet report`` and ``fedhet claims``): 0 success; 1 some sweep run
failed; 2 a configuration or input error (the message names what is wrong and what is allowed);
130 interrupted.
"""
from __future__ import annotations

import sys
from typing import Any, Callable, Optional, TextIO

EXIT_OK, EXIT_FAILED_RUNS, EXIT_INPUT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130


def say(message: str, stream: TextIO) -> None:
    """Print one line to ``stream`` at once (a sweep's progress view shares the terminal)."""
    print(message, file=stream, flush=True)


def console_streams(stdout: Optional[TextIO], stderr: Optional[TextIO]) -> tuple[TextIO, TextIO]:
    """A command's output streams: the ones given (tests pass buffers), else the process's own."""
    return stdout or sys.stdout, stderr or sys.stderr


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
            say(f"{state:<8} {label(run)}" + (f"  (conflict: {conflict})" if conflict else ""), stdout)
        return EXIT_OK
    try:
        return run_sweep(plan, jobs=jobs, overwrite=overwrite, stream=progress or stderr, options=options)
    except SweepError as error:
        say(f"{command}: {error}", stderr)
        return EXIT_INPUT_ERROR
    except KeyboardInterrupt:
        say(f"{command}: interrupted; run the same command again to resume", stderr)
        return EXIT_INTERRUPTED
