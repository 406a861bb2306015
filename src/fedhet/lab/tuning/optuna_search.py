"""The Optuna sampler of ``fedhet tune``: TPE, seeded per trial, median pruning, journal storage.

Needs the optional extra ``tune`` (``pip install 'fedhet[tune]'``, package ``optuna``). The study
lives in ``OUT/optuna.journal`` (optuna's JournalStorage on a file), so a search continues where it
stopped. The rules (seeding, pruning, jobs) are in :mod:`fedhet.lab.tuning.search`.

Each trial keeps fedhet's own outcome in the study's user attributes (``fedhet_state``: complete,
pruned or failed; ``test_accuracy``, recorded and never used; ``error``), so the trial table of a
continued search is rebuilt from the study alone, without running anything again.

The sampler's flags are set explicitly (:data:`TPE_FLAGS`) rather than left to Optuna's defaults,
which Optuna 5.0 changed (multivariate TPE and the constant liar on, and another Parzen bandwidth).
The Optuna version and the flags are recorded in ``search.json`` and the results
(:func:`study_record`); a study is continued only under the Optuna major version that began it
(:func:`check_study_record`), since another major version draws other trials from the same seed.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

from fedhet.lab.tuning.errors import TuneError
from fedhet.lab.tuning.results import COMPLETE, FAILED, PRUNED, TrialRecord
from fedhet.lab.tuning.space import SearchParameter
from fedhet.lab.tuning.trials import trial_name, trial_seed

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution

STUDY_NAME = "fedhet-tune"

# TPESampler's flags, passed explicitly so that Optuna's defaults cannot change a search: these are
# Optuna 4's defaults, the flags of every search fedhet made before they were recorded. Optuna 5
# defaults to multivariate = True and constant_liar = True; under Optuna 5 these flags still draw
# other trials than Optuna 4 (5.0 also changed the Parzen estimator's bandwidth, with no flag to
# restore it), which is why a study is continued only under the major version that began it.
TPE_FLAGS: dict[str, Any] = {"multivariate": False, "group": False, "constant_liar": False}


def import_optuna():
    try:
        import optuna
    except ImportError:
        raise TuneError("--sampler optuna needs the optional package optuna: pip install 'fedhet[tune]' "
                        "(or use --sampler grid)") from None
    return optuna


def _major(version: str) -> str:
    return str(version).split(".", 1)[0]


def study_record(optuna: Any, startup_trials: int) -> dict[str, Any]:
    """What ``search.json`` and the results record about the study's sampler: the Optuna version and
    every flag the TPE sampler is given besides its per-trial seed."""
    return {"version": optuna.__version__, "sampler": "TPESampler",
            "flags": {**TPE_FLAGS, "n_startup_trials": startup_trials}}


def check_study_record(saved: Optional[Mapping[str, Any]], current: Mapping[str, Any], out_dir: Path) -> None:
    """Refuse to continue the study of ``out_dir`` (``saved``: its recorded sampler, None when the
    search predates the record) under another Optuna major version or other sampler flags.

    A search recorded without them was made by a fedhet that left the flags to Optuna's defaults and
    was written against Optuna 4; it is continued under Optuna 4, whose defaults are :data:`TPE_FLAGS`,
    and refused under any other major version."""
    version = str(current["version"])
    if saved is None:
        if _major(version) != "4":
            raise TuneError(f"{out_dir} holds an Optuna study that did not record its Optuna version (made "
                            f"before fedhet recorded it, under Optuna 4); this is Optuna {version}, which "
                            "draws other trials from the same seed: continue it under Optuna 4 "
                            "(pip install 'optuna>=4,<5'), or run the search again with another --out")
        return
    made = str(saved.get("version", "?"))
    if _major(made) != _major(version):
        raise TuneError(f"{out_dir} holds an Optuna study begun under Optuna {made}; this is Optuna {version}, "
                        "whose sampler draws other trials from the same seed: continue it under Optuna "
                        f"{_major(made)}.x (pip install 'optuna=={_major(made)}.*'), or run the search again "
                        "with another --out")
    if saved.get("sampler") != current["sampler"] or saved.get("flags") != current["flags"]:
        raise TuneError(f"{out_dir} holds an Optuna study made with other sampler settings "
                        f"({saved.get('sampler')} {saved.get('flags')}; this fedhet uses {current['sampler']} "
                        f"{current['flags']}): continue it with the fedhet that began it, or choose another --out")


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
    can never parse (a search made unresumable by ENOSPC or a crash mid-append). Every complete
    record ends with a newline, so what follows the last one is the torn record. Call it only while
    holding the tune directory's lock."""
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
    """The study and a function from a trial's number to a live :class:`optuna.trial.Trial` of it
    (through the storage's public API, for the trials an earlier process asked for too)."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    pruner = optuna.pruners.MedianPruner(n_startup_trials=settings.startup_trials, n_warmup_steps=0)
    try:
        storage = JournalStorage(JournalFileBackend(str(journal_path)))     # replays the journal
        # Given a sampler with the flags, so that none with Optuna's defaults is ever made; each ask
        # replaces it with the asked trial's own (optuna_trials).
        study = optuna.create_study(study_name=STUDY_NAME, storage=storage, direction=settings.criterion.direction,
                                    pruner=pruner, sampler=_sampler(optuna, settings, 0), load_if_exists=True)
    except json.JSONDecodeError as error:
        # A line damaged before the journal's last one (a torn last line is cut off above): Optuna
        # cannot replay the search from it, and dropping the line would change the study.
        raise TuneError(f"{journal_path}: line {_first_bad_line(journal_path)} is not a JSON record ({error.msg}); "
                        "the search cannot be replayed from it: restore the file, or move it aside to start the "
                        "search again") from None
    study_id = storage.get_study_id_from_name(STUDY_NAME)

    def live(number: int):
        return optuna.trial.Trial(study, storage.get_trial_id_from_study_id_trial_number(study_id, number))

    return study, live


def _first_bad_line(journal_path: Path) -> int | str:
    """The number of the journal's first line that is not JSON (``?`` when none is found)."""
    with open(journal_path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                json.loads(line)
            except ValueError:
                return number
    return "?"


def _sampler(optuna, settings, number: int):
    """Trial ``number``'s sampler: TPE with :data:`TPE_FLAGS`, seeded by the trial's number."""
    return optuna.samplers.TPESampler(seed=trial_seed(settings.seed, number),
                                      n_startup_trials=settings.startup_trials, **TPE_FLAGS)


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
    study, live_trial = _open_study(optuna, settings, journal_path)
    distributions: dict[str, BaseDistribution] = {p.key: _distribution(optuna, p) for p in settings.space}
    criterion = settings.criterion
    last_round = criterion.at_round(runner.rounds)

    def finish(number: int, values: dict[str, Any], run, pruned: bool, live) -> None:
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
            batch = [(t.number, dict(t.params)) for t in running]
            reported = {t.number: set(t.intermediate_values) for t in running}
        else:
            batch, reported = [], {}
            for _ in range(min(settings.jobs, settings.trials - len(frozen))):
                number = len(study.get_trials(deepcopy=False))
                # A fresh sampler per trial, seeded by its number: the draw depends only on the trials
                # finished before it, not on how many draws this process has made.
                study.sampler = _sampler(optuna, settings, number)
                trial = study.ask(distributions)
                batch.append((trial.number, dict(trial.params)))
        if settings.jobs == 1:
            for number, values in batch:
                live = live_trial(number)

                def hook(record, live=live, done=reported.get(number, set())) -> bool:
                    step = int(record["round"])
                    if criterion.recorded not in record or step > last_round:
                        return False
                    if step not in done:      # a resumed trial repeats the rounds after its checkpoint
                        live.report(criterion.intermediate([record], runner.rounds)[0][1], step)
                    return step < last_round and live.should_prune()

                run = runner.run_one(trial_name(number), values, hook)
                finish(number, values, run, run.stopped, live)
        else:
            runs = runner.run_batch([(trial_name(number), values) for number, values in batch], settings.jobs)
            for number, values in batch:
                live = live_trial(number)
                run = runs[trial_name(number)]
                # Reported afterwards: not pruned, but the pruner of later trials sees the curve.
                for step, value in criterion.intermediate(run.records, runner.rounds):
                    live.report(value, step)
                finish(number, values, run, False, live)
    done = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    return [_from_study(t, criterion) for t in done]
