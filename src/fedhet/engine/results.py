"""What :func:`fedhet.engine.runner.run_experiment` returns: the summary, the history, the directory.

:class:`RunResult` is the run's summary mapping itself (a ``dict``: ``result["final_accuracy"]``,
``json.dumps(result)`` and every caller written when ``run_experiment`` returned the plain summary
keep working) with two more attributes: ``run_dir``, and ``history``, the evaluated rounds of
``metrics.jsonl`` (one record per evaluated round, read when first asked for). For many runs as one
table, :func:`fedhet.load_runs` (docs/experiments.md).
"""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Optional

from fedhet.engine.callbacks import read_metrics
from fedhet.errors import FedhetError


class RunExistsError(FedhetError, FileExistsError):
    """A new run's directory already holds a run. The message names the Python arguments
    (``overwrite=True``, :func:`fedhet.resume_run`); :meth:`command_line_message` the flags."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        super().__init__(f"run directory {run_dir} already holds a run; continue it with "
                         f"fedhet.resume_run({str(run_dir)!r}), replace it with run_experiment(config, "
                         "overwrite=True), or choose another run.name (load_config(path, ['run.name=...']))")

    def command_line_message(self) -> str:
        return (f"run directory {self.run_dir} already holds a run; resume it with `fedhet run --resume "
                f"{shlex.quote(str(self.run_dir))}`, choose another run.name (--set run.name=...), or pass --overwrite")


class RunResult(dict):
    """A finished run: the summary (this mapping), :attr:`history` and :attr:`run_dir`."""

    def __init__(self, summary: dict[str, Any], run_dir: str | Path):
        super().__init__(summary)
        self.run_dir = Path(run_dir)
        self._history: Optional[list[dict[str, Any]]] = None

    @property
    def summary(self) -> dict[str, Any]:
        """The summary as a plain ``dict`` (what ``summary.json`` holds)."""
        return dict(self)

    @property
    def history(self) -> list[dict[str, Any]]:
        """One record per evaluated round (``round``, ``test_accuracy``, ``train_loss``, ...), in
        order, from the run directory's ``metrics.jsonl``."""
        if self._history is None:
            self._history = [r for r in read_metrics(self.run_dir / "metrics.jsonl") if "test_accuracy" in r]
        return self._history

    def __repr__(self) -> str:
        return f"RunResult(run_dir={str(self.run_dir)!r}, summary={dict.__repr__(self)})"

    def __reduce__(self):
        # Pickled (a sweep worker's reply) as the summary and the directory; history is re-read.
        return (RunResult, (dict(self), self.run_dir))
