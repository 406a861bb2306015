"""What every tracker implements, and the helpers they share (values, parameters, scoped environment).

A tracker mirrors a run into one external tool. The :class:`~fedhet.engine.tracking.TrackingCallback`
drives it: ``start`` once per process (new run or resume), ``log_params`` once per tracked run,
``log_rounds`` with records that are already covered by a checkpoint, then ``log_summary``,
``log_files`` and ``close`` at the end. Records carry the names of ``metrics.jsonl``; the step is
the round. See docs/tracking.md.
"""
from __future__ import annotations

import abc
import contextlib
import dataclasses
import os
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, TypeVar

from fedhet.tracking.layout import metric_name


@dataclasses.dataclass(frozen=True)
class TrackingContext:
    """What a tracker needs to know about the run it mirrors."""

    run_dir: Path
    run_name: str                  # what differs, then the seed (fedhet.tracking.layout.run_identity)
    project: str                   # MLflow experiment / W&B project
    sweep: Optional[str]           # the sweep's name for a sweep run (W&B group, MLflow tag), else None
    options: Any                   # the run's RunOptions (mlflow_uri, wandb_mode, ...)
    config: dict[str, Any]         # the resolved config, nested as config.toml has it
    config_toml: str
    setting: str = ""              # the run name without the seed: the tag that groups seeds
    seed: int = 0


class Tracker(abc.ABC):
    """One external tool. ``start`` returns what must be saved to continue the same tracked run
    later (its run id, ...); on resume it receives that saved state back."""

    name = ""

    @abc.abstractmethod
    def start(self, context: TrackingContext, saved: Optional[dict[str, Any]]) -> dict[str, Any]:
        """Open a new tracked run, or reopen the one ``saved`` names; return what to save for a resume."""

    def last_logged_round(self) -> Optional[int]:
        """The last round the tool itself holds, when it can tell (None: trust the saved state)."""
        return None

    @abc.abstractmethod
    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log the resolved config (flat dotted keys) as the run's hyperparameters."""

    @abc.abstractmethod
    def log_rounds(self, records: list[dict[str, Any]]) -> None:
        """Log ``records`` (increasing rounds) and make them durable before returning."""

    @abc.abstractmethod
    def log_summary(self, summary: Mapping[str, Any], step: int) -> None:
        """Log ``summary.json`` at ``step`` (the last round): its headline values as metrics
        (:func:`fedhet.tracking.layout.headline_summary`), the whole of it as text or a file."""

    @abc.abstractmethod
    def log_files(self, paths: list[Path], run_dir: Path) -> None:
        """Attach ``paths`` (plots, config, summary) as artifacts, named relative to ``run_dir``."""

    @abc.abstractmethod
    def close(self) -> None:
        """Flush and end the tracked run in this process (a resume reopens it)."""


Handle = TypeVar("Handle")


def started(handle: Optional[Handle], tracker: str) -> Handle:
    """``handle``, the tool's writer, client or run that :meth:`Tracker.start` opened; a tracker
    used before ``start`` (or after ``close``) is a programming error, said as such."""
    if handle is None:
        raise RuntimeError(f"tracker {tracker!r} used before start() or after close()")
    return handle


def numeric_items(record: Mapping[str, Any]) -> dict[str, float]:
    """The record's numeric values under their tracker names (``test/accuracy``, ``diag/e_lud``:
    :func:`fedhet.tracking.layout.metric_name`), NaN kept, ``round`` left out (it is the step);
    strings, lists and None are not metrics and are skipped."""
    out = {}
    for key, value in record.items():
        if key == "round" or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        out[metric_name(key)] = float(value)
    return out


def flat_params(config: Mapping[str, Any]) -> dict[str, Any]:
    """The nested config as ``section.key`` -> a scalar (lists and None written as text), the form
    hyperparameter tables take."""
    flat: dict[str, Any] = {}
    for section, values in config.items():
        items = values.items() if isinstance(values, Mapping) else [(None, values)]
        for key, value in items:
            name = section if key is None else f"{section}.{key}"
            if value is None:
                value = "none"
            elif isinstance(value, (list, tuple)):
                value = ",".join(str(v) for v in value)
            flat[name] = value
    return flat


@contextlib.contextmanager
def scoped_environ(values: Mapping[str, str]) -> Iterator[None]:
    """Set environment variables for the duration of a tracker call, then restore the caller's.

    The tools read their switches (offline mode, telemetry, cache folders) from the environment;
    setting them only around their calls keeps the user's process environment as it was.
    """
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
