"""The search loop of ``fedhet tune``: grid or Optuna (TPE with median pruning), resumable, seeded.

Rules (docs/tuning.md):

- **Choice.** The trial with the best criterion value among the completed ones (ties: the lowest
  trial number); pruned and failed trials are never chosen. Only ``(trial, criterion value)``
  pairs reach :func:`fedhet.lab.tuning.criteria.select_best`.
- **Failures.** A trial whose run fails (e.g. diverges) is recorded as ``failed`` with its error;
  Optuna is told the criterion's worst value (``+inf`` for a loss), so TPE learns to avoid the
  region. A search in which every trial failed is an error.
- **Resume.** The out directory holds ``search.json`` (the space, criterion, sampler and seed:
  another search is refused there), one run directory per trial under ``trials/`` (finished runs
  are read back, interrupted ones resume from their checkpoints) and, for Optuna, the study in
  ``optuna.journal`` (optuna's JournalStorage). A trial interrupted mid-run is finished with the
  values it was given. Raising ``--trials`` continues a search. ``search.json`` also records the
  Optuna version and the sampler's flags; a study is continued only under the same Optuna major
  version and flags (:func:`fedhet.lab.tuning.optuna_search.check_study_record`).
- **Seeding.** Grid: the points are fixed. Optuna: trial ``k`` is drawn by a TPE sampler seeded with
  ``derive_seed(seed, "tune", k)`` from the trials finished before it, so the draw does not depend
  on whether the search was interrupted in between.
- **Parallel jobs.** Grid trials run ``jobs`` at a time as sweep workers. Optuna with ``jobs = 1``
  runs trials in this process and prunes them at evaluation rounds (the median rule on the
  criterion's metric); with ``jobs > 1`` it asks ``jobs`` trials at a time and runs them as sweep
  workers, which are not pruned (their intermediate values are still reported for later trials).
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Callable, Optional

from fedhet.core import atomic_write_json
from fedhet.engine import DirectoryLock
from fedhet.lab.tuning.criteria import Criterion, select_best
from fedhet.lab.tuning.errors import TuneError
from fedhet.lab.tuning.results import COMPLETE, FAILED, PRUNED, TrialRecord, format_table, write_results
from fedhet.lab.tuning.space import SearchParameter, describe, grid_points
from fedhet.lab.tuning.trials import TrialRun, TrialRunner, trial_name

SEARCH_FILE = "search.json"
JOURNAL_FILE = "optuna.journal"
SAMPLERS = ("grid", "optuna")
# search.json's record of the Optuna version and sampler flags (fedhet.lab.tuning.optuna_search.study_record).
STUDY_KEY = "optuna"


@dataclasses.dataclass(frozen=True)
class SearchSettings:
    space: tuple[SearchParameter, ...]
    criterion: Criterion
    sampler: str = "grid"
    trials: Optional[int] = None          # Optuna: number of trials (grid: every point)
    seed: int = 0
    jobs: int = 1
    startup_trials: int = 5               # Optuna: random trials before TPE, and before any pruning

    def identity(self) -> dict[str, Any]:
        """What must match to continue a search in the same out directory."""
        return {"space": describe(self.space), "criterion": self.criterion.text, "sampler": self.sampler,
                "seed": self.seed, "startup_trials": self.startup_trials}


@dataclasses.dataclass
class SearchResult:
    trials: list[TrialRecord]
    best: Optional[TrialRecord]               # None only when run with require_complete = False
    keys: list[str]
    criterion: Criterion

    def table(self) -> str:
        return format_table(self.trials, self.keys, self.criterion, self.best)


def _check_out_dir(out_dir: Path, settings: SearchSettings, study: Optional[dict[str, Any]]) -> None:
    """Refuse another search in ``out_dir``, or an Optuna study under another major version or other
    sampler flags (``study``: this process's :func:`~fedhet.lab.tuning.optuna_search.study_record`), then
    record the search in ``search.json``."""
    path = out_dir / SEARCH_FILE
    identity = settings.identity()
    if path.is_file():
        saved = json.loads(path.read_text(encoding="utf-8"))
        recorded = saved.pop(STUDY_KEY, None)
        differing = sorted(k for k in set(saved) | set(identity) if saved.get(k) != identity.get(k))
        if differing:
            raise TuneError(f"{out_dir} holds another search (it differs in {', '.join(differing)}); "
                            "continue it with its own settings, or choose another --out")
        if study is not None:
            from fedhet.lab.tuning.optuna_search import check_study_record

            check_study_record(recorded, study, out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, {**identity, **({STUDY_KEY: study} if study is not None else {})})


def _record(number: int, values: dict[str, Any], run: TrialRun, criterion: Criterion, rounds: int,
            *, pruned: bool = False) -> TrialRecord:
    tested = [r["test_accuracy"] for r in run.records if "test_accuracy" in r]
    test_accuracy = float(tested[-1]) if tested else None
    if run.error is not None:
        return TrialRecord(number, trial_name(number), values, FAILED, criterion.worst(), test_accuracy,
                           run.error.splitlines()[0][:200])
    value = criterion.value(run.records, rounds)
    if pruned or run.stopped or value is None:
        return TrialRecord(number, trial_name(number), values, PRUNED, None, test_accuracy)
    return TrialRecord(number, trial_name(number), values, COMPLETE, value, test_accuracy)


def _grid(settings: SearchSettings, runner: TrialRunner, log: Callable[[str], None]) -> list[TrialRecord]:
    points = grid_points(settings.space)
    log(f"grid: {len(points)} trials, {settings.jobs} at a time")
    runs = runner.run_batch([(trial_name(i), p) for i, p in enumerate(points)], settings.jobs)
    return [_record(i, p, runs[trial_name(i)], settings.criterion, runner.rounds) for i, p in enumerate(points)]


def run_search(settings: SearchSettings, runner: TrialRunner, out_dir: str | Path, *, command: str = "",
               log: Callable[[str], None] = lambda message: None, require_complete: bool = True) -> SearchResult:
    """Run (or continue) the search in ``out_dir``; write its results; return them (module docstring).
    ``require_complete = False``: a search whose every trial failed is a result (a pre-registered stage
    decides over several searches), not an error."""
    if settings.sampler not in SAMPLERS:
        raise TuneError(f"--sampler {settings.sampler!r}: allowed: {', '.join(SAMPLERS)}")
    if settings.jobs < 1:
        raise TuneError(f"--jobs must be at least 1, got {settings.jobs}")
    if settings.sampler == "grid" and settings.trials is not None:
        raise TuneError("--trials applies to --sampler optuna; the grid runs every point")
    if settings.sampler == "optuna" and (settings.trials is None or settings.trials < 1):
        raise TuneError("--sampler optuna needs --trials N (N >= 1)")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    # One search per out directory at a time: two would resume each other's running trials and
    # record them failed. Held until the results are written.
    with DirectoryLock(out_dir, what="tune directory"):
        return _search_locked(settings, runner, out_dir, command=command, log=log, require_complete=require_complete)


def _search_locked(settings: SearchSettings, runner: TrialRunner, out_dir: Path, *, command: str,
                   log: Callable[[str], None], require_complete: bool) -> SearchResult:
    study = None
    if settings.sampler == "optuna":
        from fedhet.lab.tuning.optuna_search import import_optuna, study_record

        study = study_record(import_optuna(), settings.startup_trials)
    _check_out_dir(out_dir, settings, study)
    if settings.sampler == "grid":
        trials = _grid(settings, runner, log)
    else:
        from fedhet.lab.tuning.optuna_search import optuna_trials, repair_torn_journal

        journal = out_dir / JOURNAL_FILE
        if repair_torn_journal(journal):
            log(f"warning: {journal} ended in a torn line (an interrupted write); it was cut off, the "
                "trial it described is run again")
        trials = optuna_trials(settings, runner, journal, _record, log)
    keys = [p.key for p in settings.space]
    completed = [t for t in trials if t.state == COMPLETE]
    number = select_best([(t.number, t.value) for t in completed], settings.criterion)
    best = next((t for t in trials if t.number == number), None)
    write_results(out_dir, trials, keys, settings.criterion, best, sampler=settings.sampler, command=command,
                  study=study)
    if best is None and require_complete:
        first = next((t.error for t in trials if t.error), "no trial reached the criterion's round")
        raise TuneError(f"no trial of the search in {out_dir} completed (first error: {first}); "
                        "see trials.csv and each trial's sweep.log")
    return SearchResult(trials, best, keys, settings.criterion)

