"""Trials as fedhet runs: one run directory per trial under ``OUT/trials``, run through the sweep
machinery (:mod:`fedhet.lab.sweep.execute`), so finished trials are skipped and interrupted ones
resume from their checkpoints.

A :class:`TrialRunner` is what the search drives; :class:`ConfigTrialRunner` runs a base experiment
file with each trial's values as overrides. Tests supply their own runner for problems that are not
experiment files (e.g. the least-squares problem), with the same records.
"""
from __future__ import annotations

import dataclasses
import io
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence

from fedhet.config import ConfigError, ExperimentConfig
from fedhet.core import derive_seed
from fedhet.engine import Callback, RunDirectoryInUseError, read_metrics
from fedhet.lab.tuning.errors import TuneError

# Failures of the machine rather than of a trial's values: they stop the search (see run_one).
# MemoryError covers ResourceLimitError (the run's own memory and disk estimate), OSError a full or
# read-only disk; RunDirectoryInUseError is another process on the trial's directory.
ENVIRONMENT_FAILURES: tuple[type[BaseException], ...] = (OSError, MemoryError, RunDirectoryInUseError)

# A sweep run's exit status 1 is a failure of the machine (fedhet.lab.sweep.outcome.RunOutcome.exit_status).
MACHINE_FAILURE = 1

# Called with each evaluated round's record; returning True stops the run there (pruning).
RecordHook = Callable[[Mapping[str, Any]], bool]


@dataclasses.dataclass
class TrialRun:
    """What one trial's run produced: its evaluated records, or the error that ended it."""

    records: list[dict[str, Any]]
    error: Optional[str] = None
    stopped: bool = False            # stopped by the record hook (pruned)


class TrialRunner(Protocol):
    rounds: int

    def run_batch(self, trials: Sequence[tuple[str, Mapping[str, Any]]], jobs: int) -> dict[str, TrialRun]:
        """Run (or finish) the named trials, ``jobs`` at a time; a finished trial is not run again."""
        ...

    def run_one(self, name: str, values: Mapping[str, Any], hook: RecordHook) -> TrialRun:
        """Run (or finish) one trial in this process, calling ``hook`` after each evaluated round."""
        ...


def trial_name(number: int) -> str:
    return f"trial-{number:04d}"


class _HookCallback(Callback):
    def __init__(self, hook: RecordHook):
        self.hook = hook

    def on_round_end(self, run, record) -> bool:
        return bool(self.hook(record)) if "test_accuracy" in record else False


class ConfigTrialRunner:
    """Trials of an experiment file: ``base`` (parsed TOML) + ``sets`` + the trial's values.

    ``lockstep`` (``off`` / ``on`` / ``auto``): whether :meth:`run_batch` trains the batch's trials that
    share a model and local solver together (``fedhet sweep --lockstep``, :mod:`fedhet.lab.sweep.options`);
    ``log`` receives its one-line notes (a trial that trains alone, and why). :meth:`run_one` runs a
    trial alone."""

    def __init__(self, config_path: str | Path, sets: Mapping[str, Any], trials_dir: Path, *,
                 lockstep: str = "auto", log: Callable[[str], None] = lambda message: None):
        from fedhet.config import read_toml_file
        from fedhet.lab.sweep.plan import build_run_config

        self.config_path = Path(config_path)
        self.raw = read_toml_file(self.config_path, key="config")
        self.sets = dict(sets)
        self.trials_dir = trials_dir
        self.lockstep, self.log = lockstep, log
        self._build = build_run_config
        self.base: ExperimentConfig = self.config({}, "base")
        self.rounds = self.base.run.rounds

    def config(self, values: Mapping[str, Any], name: str) -> ExperimentConfig:
        overrides = {**self.sets, **values, "run.name": name, "run.out_dir": str(self.trials_dir),
                     "run.progress": False}
        try:
            config = self._build(self.raw, overrides)
        except ConfigError as error:
            raise ConfigError(error.key, error.value, f"{error.allowed} (in tuning trial {name})") from None
        if config.run.stop_at_target and config.run.target_accuracy is not None:
            # A trial stopped by its test accuracy would be pruned or shortened by the test set, which
            # must not enter the choice (docs/tuning.md).
            raise TuneError("run.stop_at_target = true stops a trial when its test accuracy reaches "
                            "run.target_accuracy, so the test set would decide which trial is chosen; "
                            "fedhet tune refuses it: set run.stop_at_target = false")
        return config

    def _planned(self, name: str, values: Mapping[str, Any]):
        from fedhet.lab.sweep.plan import PlannedRun

        config = self.config(values, name)
        assignments = tuple((key, repr(value)) for key, value in values.items())
        return PlannedRun(name, self.trials_dir / name, config, None, assignments, config.run.seed)

    def _plan(self, runs):
        from fedhet.lab.sweep.plan import SweepPlan

        return SweepPlan(self.config_path, self.config_path.stem, self.trials_dir, tuple(runs))

    def run_batch(self, trials: Sequence[tuple[str, Mapping[str, Any]]], jobs: int) -> dict[str, TrialRun]:
        from fedhet.lab.sweep.execute import run_sweep

        if not trials:
            return {}
        planned = [self._planned(name, values) for name, values in trials]
        # The sweep's own progress block is not shown: the search reports trial by trial.
        result = run_sweep(self._plan(planned), jobs=jobs, stream=io.StringIO(), live=False, lockstep=self.lockstep,
                           notes=self.log)
        machine = [o for o in result.outcomes if o.status == "failed" and o.exit_status == MACHINE_FAILURE]
        if machine:
            # As in run_one: the machine failed (a full disk, no memory, the resource estimate refused,
            # a worker killed), not the trials' values; none of the batch is recorded, so the same
            # command runs them again. This holds whether the sweep ran the batch on worker processes
            # or, for a single unfinished trial, in this process.
            last = (machine[0].error or "").strip().splitlines()[-1]
            raise TuneError(f"trial {machine[0].run.name} failed for a reason of the machine, not of its values "
                            f"({last}); the search stops here: free the resource and run the same command again")
        out = {}
        for outcome in result.outcomes:
            records = read_metrics(outcome.run.run_dir / "metrics.jsonl")
            out[outcome.run.name] = TrialRun(records, outcome.error if outcome.status == "failed" else None,
                                             stopped=bool((outcome.summary or {}).get("stopped_early")))
        return out

    def run_one(self, name: str, values: Mapping[str, Any], hook: RecordHook) -> TrialRun:
        from fedhet.lab.sweep.plan import FINISHED, RESUME, read_summary, run_state
        from fedhet.lab.sweep.worker import execute_run

        run = self._planned(name, values)
        state, conflict = run_state(run)
        if conflict:
            raise TuneError(f"trial directory {run.run_dir}: {conflict}; the search's settings changed "
                            "since it started: use a new --out")
        if state != FINISHED:
            run.run_dir.mkdir(parents=True, exist_ok=True)
            try:
                execute_run(run.config, run.run_dir, resume=state == RESUME, callbacks=[_HookCallback(hook)])
            except (KeyboardInterrupt, ConfigError) + ENVIRONMENT_FAILURES:
                # The machine failed, not the trial's values (a full disk, no memory, the directory in
                # use): the search stops and the trial stays unfinished, so that running the same
                # command again runs it.
                raise
            except Exception as error:     # a diverged or failed trial is a result, not the search's end
                return TrialRun(read_metrics(run.run_dir / "metrics.jsonl"), f"{type(error).__name__}: {error}")
        summary = read_summary(run.run_dir) or {}
        return TrialRun(read_metrics(run.run_dir / "metrics.jsonl"), stopped=bool(summary.get("stopped_early")))


def trial_seed(seed: int, number: int) -> int:
    """The TPE sampler's seed for trial ``number`` (see :mod:`fedhet.lab.tuning.search`, "Seeding")."""
    return derive_seed(seed, "tune", number) % (2 ** 32)
