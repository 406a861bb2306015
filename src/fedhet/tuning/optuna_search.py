"""The Optuna sampler of ``fedhet tune``: TPE, seeded per trial, median pruning, journal storage.

Needs the optional extra ``tune`` (``pip install 'fedhet[tune]'``, package ``optuna``). The study
lives in ``OUT/optuna.journal`` (optuna's JournalStorage on a file), so a search continues where it
stopped. The rules (seeding, pruning, jobs) are in :mod:`fedhet.tuning.search`.

Each trial keeps fedhet's own outcome in the study's user attributes (``fedhet_state``: complete,
pruned or failed; ``test_accuracy``, recorded and never used; ``error``), so the trial table of a
continued search is rebuilt from the study alone, without running anything again.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from fedhet.tuning.errors import TuneError
from fedhet.tuning.results import COMPLETE, FAILED, PRUNED, TrialRecord
from fedhet.tuning.space import SearchParameter
from fedhet.tuning.trials import trial_name, trial_seed

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution

STUDY_NAME = "fedhet-tune"


def import_optuna():
    try:
        import optuna
    except ImportError:
        raise TuneError("--sampler optuna needs the optional package optuna: pip install 'fedhet[tune]' "
                        "(or use --sampler grid)") from None
    return optuna


def _distribution(optuna: Any, parameter: SearchParameter) -> BaseDistribution:
    if parameter.is_range:
        return optuna.distributions.FloatDistribution(parameter.low, parameter.high, log=parameter.log)
    for value in parameter.values:
        if value is not None and not isinstance(value, (bool, int, float, str)):
            raise TuneError(f"--param {parameter.key}: Optuna can choose among numbers, booleans and "
                            f"strings only, not {value!r}")
    return optuna.distributions.CategoricalDistribution(list(parameter.values))


def repair_torn_journal(journal_path: Path) -> bool:
    """Cut a torn last line off the journal; True when there was one. Optuna skips such a line when
    it reads the journal but appends its next record right after it, fusing the two into a line it
    can never parse (finding L1 of the 2026-11-24 campaign: a search made unresumable by ENOSPC or
    a crash mid-append). Every complete record ends with a newline, so what follows the last one is
    the torn record. Call it only while holding the tune directory's lock."""
    if not journal_path.is_file():
        return False
    with open(journal_path, "rb+") as handle:
        size = handle.seek(0, os.SEEK_END)
        if size == 0:
            return False
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return False
        # Scan back in blocks for the last newline (a record is a few hundred bytes).
        end, keep = size, 0
        while end > 0:
            start = max(0, end - 65536)
            handle.seek(start)
            block = handle.read(end - start)
            index = block.rfind(b"\n")
            if index >= 0:
                keep = start + index + 1
                break
            end = start
        handle.truncate(keep)
        handle.flush()
        os.fsync(handle.fileno())
    return True


def _open_study(optuna, settings, journal_path: Path):
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    pruner = optuna.pruners.MedianPruner(n_startup_trials=settings.startup_trials, n_warmup_steps=0)
    try:
        storage = JournalStorage(JournalFileBackend(str(journal_path)))     # replays the journal
        return optuna.create_study(study_name=STUDY_NAME, storage=storage, direction=settings.criterion.direction,
                                   pruner=pruner, load_if_exists=True)
    except json.JSONDecodeError as error:
        # A line damaged before the journal's last one (a torn last line is cut off above): Optuna
        # cannot replay the search from it, and dropping the line would change the study.
        raise TuneError(f"{journal_path}: line {_first_bad_line(journal_path)} is not a JSON record ({error.msg}); "
                        "the search cannot be replayed from it: restore the file, or move it aside to start the "
                        "search again") from None


def _first_bad_line(journal_path: Path) -> int | str:
    """The number of the journal's first line that is not JSON (``?`` when none is found)."""
    with open(journal_path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                json.loads(line)
            except ValueError:
                return number
    return "?"


def _from_study(frozen, criterion) -> TrialRecord:
    attrs = frozen.user_attrs
    state = attrs.get("fedhet_state", PRUNED)
    value = None if state == PRUNED else (criterion.worst() if state == FAILED else frozen.value)
    return TrialRecord(frozen.number, trial_name(frozen.number), dict(frozen.params), state, value,
                       attrs.get("test_accuracy"), attrs.get("error"))


def optuna_trials(settings, runner, journal_path: Path, make_record: Callable[..., TrialRecord],
                  log: Callable[[str], None]) -> list[TrialRecord]:
    """Run the study up to ``settings.trials`` trials; every trial's record, in trial order."""
    optuna = import_optuna()
    RUNNING = optuna.trial.TrialState.RUNNING
    study = _open_study(optuna, settings, journal_path)
    distributions: dict[str, BaseDistribution] = {p.key: _distribution(optuna, p) for p in settings.space}
    criterion = settings.criterion
    last_round = criterion.at_round(runner.rounds)

    def finish(trial_id: int, number: int, values: dict[str, Any], run, pruned: bool, live) -> None:
        record = make_record(number, values, run, criterion, runner.rounds, pruned=pruned)
        live.set_user_attr("fedhet_state", record.state)
        live.set_user_attr("test_accuracy", record.test_accuracy)
        live.set_user_attr("error", record.error)
        if record.state == PRUNED:
            study.tell(number, state=optuna.trial.TrialState.PRUNED)
        else:       # a failed trial is told the worst value, so TPE learns to avoid its region
            study.tell(number, record.value)
        log(f"trial {number}: {record.state}" + (f", {criterion.text} = {record.value:.6g}"
                                                 if record.state == COMPLETE else "") + f"  {values}")

    while True:
        frozen = study.get_trials(deepcopy=False)
        running = [t for t in frozen if t.state == RUNNING]
        if not running and len(frozen) >= settings.trials:
            break
        if running:
            # Interrupted before: finish them with the values they were given (their runs resume).
            batch = [(t._trial_id, t.number, dict(t.params)) for t in running]
            reported = {t.number: set(t.intermediate_values) for t in running}
        else:
            batch, reported = [], {}
            for _ in range(min(settings.jobs, settings.trials - len(frozen))):
                number = len(study.get_trials(deepcopy=False))
                # A fresh sampler per trial, seeded by its number: the draw depends only on the trials
                # finished before it, not on how many draws this process has made.
                study.sampler = optuna.samplers.TPESampler(seed=trial_seed(settings.seed, number),
                                                           n_startup_trials=settings.startup_trials)
                trial = study.ask(distributions)
                batch.append((trial._trial_id, trial.number, dict(trial.params)))
        if settings.jobs == 1:
            for trial_id, number, values in batch:
                live = optuna.trial.Trial(study, trial_id)

                def hook(record, live=live, done=reported.get(number, set())) -> bool:
                    step = int(record["round"])
                    if criterion.recorded not in record or step > last_round:
                        return False
                    if step not in done:      # a resumed trial repeats the rounds after its checkpoint
                        live.report(criterion.intermediate([record], runner.rounds)[0][1], step)
                    return step < last_round and live.should_prune()

                run = runner.run_one(trial_name(number), values, hook)
                finish(trial_id, number, values, run, run.stopped, live)
        else:
            runs = runner.run_batch([(trial_name(number), values) for _, number, values in batch], settings.jobs)
            for trial_id, number, values in batch:
                live = optuna.trial.Trial(study, trial_id)
                run = runs[trial_name(number)]
                # Reported afterwards: not pruned, but the pruner of later trials sees the curve.
                for step, value in criterion.intermediate(run.records, runner.rounds):
                    live.report(value, step)
                finish(trial_id, number, values, run, False, live)
    done = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    return [_from_study(t, criterion) for t in done]
