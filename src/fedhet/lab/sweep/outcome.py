"""What became of one run of a sweep, shared by the local and the Ray executors
(:mod:`fedhet.lab.sweep.execute`, :mod:`fedhet.lab.sweep.ray_executor`)."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Optional

from fedhet.core import UnsafeLogFileError, read_log_tail
from fedhet.lab.sweep.plan import PlannedRun
from fedhet.lab.sweep.progress import DONE, FAILED, SweepProgress


@dataclasses.dataclass
class RunOutcome:
    run: PlannedRun
    status: str                      # done | skipped (finished before) | failed
    summary: Optional[dict[str, Any]] = None
    error: Optional[str] = None
    # A failed run's exit status as the command line's (fedhet.error_lines): 1 the machine (a full
    # disk, no memory, a refused resource estimate, its worker process killed), 2 the run's input,
    # 3 a bug; None when the executor cannot tell (Ray). `fedhet tune` stops on 1 instead of
    # recording the trial as failed.
    exit_status: Optional[int] = None


def tail_of(path: Path, lines: int = 6) -> str:
    """The end of a run's log for a failure message; a log that is a link, a hard link or not a
    regular file is not read, and the reason stands in for its tail (fedhet.core.log_files)."""
    try:
        return read_log_tail(path, lines)
    except UnsafeLogFileError as error:
        return str(error)


def show_outcome(view: SweepProgress, outcome: RunOutcome) -> None:
    if outcome.status == DONE:
        view.update(outcome.run.name, DONE, accuracy=(outcome.summary or {}).get("final_accuracy"))
    else:
        view.update(outcome.run.name, FAILED, note=(outcome.error or "").splitlines()[0][:80])
