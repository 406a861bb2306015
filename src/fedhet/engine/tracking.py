"""The round-loop callback that feeds the trackers of ``run.trackers``.

Rule: a round reaches the trackers only once a checkpoint covers it (the callback runs after
:class:`~fedhet.engine.callbacks.CheckpointCallback` and follows the same
:func:`~fedhet.engine.callbacks.checkpoint_due`). A run killed between two checkpoints therefore
has logged nothing that its resume will compute again, and the resume logs exactly the rounds after
the last one each tracker holds (asked of the tool where it can tell); no step is logged twice. Until the next
checkpoint (``run.checkpoint_every``) rounds wait in memory; the last round is always checkpointed,
so a finished run has logged every evaluated round.

``RUN_DIR/tracking.json`` keeps, per tracker, what continues the same tracked run (run ids) and the
last round it logged; it is written atomically after every logging step. See docs/tracking.md.
"""
from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any, Optional

from fedhet.config.schema import config_to_toml
from fedhet.core.io import atomic_write_json, read_small_file
from fedhet.engine.callbacks import Callback, checkpoint_due
from fedhet.tracking.base import Tracker, TrackingContext, flat_params
from fedhet.tracking.layout import run_identity, sweep_viewer_commands, viewer_commands
from fedhet.tracking.names import check_trackers_installed

logger = logging.getLogger(__name__)

STATE_FILE = "tracking.json"
SWEEP_RUN_FILE = "sweep_run.json"   # written into each run directory by `fedhet sweep`
DEFAULT_PROJECT = "fedhet"
# Files of the run directory sent as artifacts at the end, beside every PNG plot.
_EXTRA_FILES = ("config.toml", "summary.json")


def make_tracker(name: str) -> Tracker:
    """Import the tracker's module (and so its package) only now that it is used."""
    if name == "tensorboard":
        from fedhet.tracking.tensorboard import TensorBoardTracker
        return TensorBoardTracker()
    if name == "mlflow":
        from fedhet.tracking.mlflow import MlflowTracker
        return MlflowTracker()
    if name == "wandb":
        from fedhet.tracking.wandb import WandbTracker
        return WandbTracker()
    raise ValueError(f"unknown tracker {name!r}")   # names are validated with the config


def sweep_record(run_dir: Path) -> Optional[dict[str, Any]]:
    """The run's ``sweep_run.json`` (label, assignments, seed, base_name), or None for a single run
    ({} when the file cannot be read)."""
    path = run_dir / SWEEP_RUN_FILE
    if not path.is_file():
        return None
    try:
        # read_small_file: a FIFO or /dev/zero planted as the file is refused, not read.
        record = json.loads(read_small_file(path).decode("utf-8"))
    except (ValueError, TypeError, OSError, RecursionError):
        return {}
    return record if isinstance(record, dict) else {}


def sweep_name(run_dir: Path) -> Optional[str]:
    """The sweep a run belongs to (its ``sweep_run.json``'s base name), or None for a single run."""
    record = sweep_record(run_dir)
    if record is None:
        return None
    base = record.get("base_name")
    return str(base) if base else run_dir.resolve().parent.name


def read_state(run_dir: Path) -> dict[str, Any]:
    path = run_dir / STATE_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def sweep_viewer_lines(runs: list[tuple[str, int, Path]]) -> list[str]:
    """The viewer commands of a sweep's tracked runs, given as ``(run.name, run.seed, run directory)``
    (``fedhet sweep`` prints them at the end; runs that tracked nothing are left out)."""
    tracked = []
    for name, seed, run_dir in runs:
        state = read_state(Path(run_dir))
        if state:
            tracked.append((run_identity(name, seed, sweep_record(Path(run_dir))), Path(run_dir), state))
    return sweep_viewer_commands(tracked)


def tracking_callbacks(config: Any, run_dir: Path, resume: bool) -> list[Callback]:
    """The callback of ``config.run.trackers`` (none when empty); raises
    :class:`~fedhet.tracking.names.TrackerUnavailableError` when a package is missing."""
    return [TrackingCallback(config, run_dir, resume=resume)] if config.run.trackers else []


def tracking_folders() -> tuple[str, ...]:
    """The folders the trackers write inside a run directory (TensorBoard's and W&B's)."""
    from fedhet.tracking.tensorboard import LOG_DIR
    from fedhet.tracking.wandb import WANDB_DIR

    return (LOG_DIR, WANDB_DIR)


def clear_tracking_files(run_dir: Path) -> None:
    """Remove the trackers' files of an earlier run from ``run_dir`` (only fedhet's own: the state
    file and the TensorBoard and W&B folders; MLflow's store is outside the run directory)."""
    from fedhet.tracking.tensorboard import LOG_DIR
    from fedhet.tracking.wandb import WANDB_DIR

    (run_dir / STATE_FILE).unlink(missing_ok=True)
    for folder in (LOG_DIR, WANDB_DIR):
        shutil.rmtree(run_dir / folder, ignore_errors=True)


class TrackingCallback(Callback):
    """Mirrors the run into each tracker of ``config.run.trackers`` (see the module docstring)."""

    def __init__(self, config: Any, run_dir: Path, *, resume: bool):
        check_trackers_installed(config.run.trackers)
        self.config = config
        self.run_dir = Path(run_dir)
        self.resume = resume
        self.trackers: dict[str, Tracker] = {}
        self.state: dict[str, dict[str, Any]] = {}
        self.pending: list[dict[str, Any]] = []

    def _context(self) -> TrackingContext:
        sweep = sweep_name(self.run_dir)
        options = self.config.run
        identity = run_identity(options.name, options.seed, sweep_record(self.run_dir))
        return TrackingContext(run_dir=self.run_dir, run_name=identity.name,
                               project=options.tracker_project or sweep or DEFAULT_PROJECT, sweep=sweep,
                               options=options, config=self.config.to_dict(),
                               config_toml=config_to_toml(self.config), setting=identity.setting,
                               seed=identity.seed)

    def on_run_start(self, run):
        if not self.resume:
            clear_tracking_files(self.run_dir)     # a new run in a reused directory starts new tracked runs
        saved_state = read_state(self.run_dir)
        context = self._context()
        params = flat_params(context.config)
        for name in self.config.run.trackers:
            saved = saved_state.get(name)
            if saved is not None and saved.get("finished") and run.next_round >= self.config.run.rounds:
                # A finished run resumed again, nothing left to compute: its tracked run is complete.
                self.state[name] = saved
                continue
            tracker = make_tracker(name)
            state = tracker.start(context, saved)
            state.pop("finished", None)
            if saved is None:
                tracker.log_params(params)
            told = tracker.last_logged_round()
            state["last_round"] = told if told is not None else int((saved or {}).get("last_round", 0))
            self.trackers[name] = tracker
            self.state[name] = state
            logger.info("tracking: %s %s (%s)", name, "resumed" if saved else "started",
                        ", ".join(f"{key} {value}" for key, value in state.items()))
        self._save_state()
        # On resume, metrics.jsonl holds the rounds up to the checkpoint: send those a tracker lacks.
        self.pending = list(run.records)
        self._flush()

    def on_round_end(self, run, record):
        if "test_accuracy" in record:          # the rounds metrics.jsonl records
            self.pending.append(record)
        if checkpoint_due(record["round"], self.config.run.checkpoint_every, self.config.run.rounds):
            self._flush()                       # CheckpointCallback, before this one, has just saved
        return False

    def on_run_end(self, run, summary):
        self._flush()
        files = sorted(self.run_dir.glob("*.png")) + [self.run_dir / name for name in _EXTRA_FILES
                                                      if (self.run_dir / name).is_file()]
        for name, tracker in self.trackers.items():
            tracker.log_summary(summary, step=int(summary.get("rounds", run.next_round)))
            tracker.log_files(files, self.run_dir)
            tracker.close()
            self.state[name]["finished"] = True
        self._save_state()
        for command in viewer_commands(self.state, self.run_dir):
            logger.info("view: %s", command)

    def _flush(self) -> None:
        if not self.pending:
            return
        for name, tracker in self.trackers.items():
            last = self.state[name]["last_round"]
            new = [record for record in self.pending if record["round"] > last]
            if new:
                tracker.log_rounds(new)
                self.state[name]["last_round"] = int(new[-1]["round"])
        self.pending = []
        self._save_state()

    def _save_state(self) -> None:
        atomic_write_json(self.run_dir / STATE_FILE, self.state)
