"""``fedhet tune`` against the environment: the test set cannot stop a trial, a failure of the
machine is not a trial result, one search per out directory, and a torn journal line is repaired
(campaign 2026-11-24 findings W1, W2, W3 and L1; docs/reliability.md)."""
import dataclasses
import errno
import json
import shutil

import pytest
from least_squares_runner import LeastSquaresRunner, optuna_settings, trial_table
from test_tuning_command import GRID, SMALL_TOML

import fedhet.components  # noqa: F401  (registers the solvers and servers)
from fedhet.cli import main
from fedhet.engine.rundir_lock import DirectoryLock, RunDirectoryInUseError
from fedhet.lab.tuning.search import JOURNAL_FILE, run_search
from fedhet.lab.tuning.space import parse_parameter
from fedhet.problems.least_squares import make_least_squares

ROUNDS = 12


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(SMALL_TOML)
    return path


@pytest.fixture(scope="module")
def problem():
    return make_least_squares(num_clients=4, dim=3, examples_per_client=12, scale_spread=0.5, seed=3)


def _settings(trials=5):
    return optuna_settings(ROUNDS, trials)


def test_tune_refuses_stop_at_target(config, tmp_path, capsys):
    status = main(["tune", str(config), *GRID, "--out", str(tmp_path / "out"), "--criterion", "train_loss@4",
                   "--set", "run.stop_at_target=true", "--set", "run.target_accuracy=0.5"])
    assert status == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "run.stop_at_target = true" in err[0] and "test set" in err[0]
    assert not (tmp_path / "out" / "trials").exists()


def test_environment_failure_stops_the_search_and_the_trial_runs_again(config, tmp_path, monkeypatch, capsys):
    pytest.importorskip("optuna")
    args = ["tune", str(config), "--param", "client.learning_rate=0.01,0.3,3", "--sampler", "optuna",
            "--trials", "3", "--seed", "3", "--criterion", "train_loss@4"]
    assert main([*args, "--out", str(tmp_path / "whole")]) == 0
    import fedhet.lab.sweep.worker as worker

    real = worker.execute_run
    calls = []

    def full_disk_at_the_second_trial(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*a, **k)

    monkeypatch.setattr(worker, "execute_run", full_disk_at_the_second_trial)
    assert main([*args, "--out", str(tmp_path / "parts")]) == 1          # one line, the search stops
    assert "no space left" in capsys.readouterr().err.lower()
    assert not (tmp_path / "parts" / "best.json").exists()
    monkeypatch.setattr(worker, "execute_run", real)
    assert main([*args, "--out", str(tmp_path / "parts")]) == 0
    whole = json.loads((tmp_path / "whole" / "trials.json").read_text())["trials"]
    parts = json.loads((tmp_path / "parts" / "trials.json").read_text())["trials"]
    assert [t["state"] for t in parts] == [t["state"] for t in whole] and "failed" not in [t["state"] for t in parts]
    assert parts == whole


def test_two_tunes_on_one_out_are_refused(problem, tmp_path):
    pytest.importorskip("optuna")
    holder = DirectoryLock(tmp_path / "out", what="tune directory").acquire()
    try:
        with pytest.raises(RunDirectoryInUseError, match="tune directory .* is in use by process"):
            run_search(_settings(), LeastSquaresRunner(problem, ROUNDS), tmp_path / "out")
    finally:
        holder.release()
    assert not (tmp_path / "out" / JOURNAL_FILE).exists()


def test_a_torn_journal_tail_is_repaired_and_the_search_resumes(problem, tmp_path):
    pytest.importorskip("optuna")
    whole = run_search(_settings(), LeastSquaresRunner(problem, ROUNDS), tmp_path / "whole")
    shutil.copytree(tmp_path / "whole", tmp_path / "torn")
    journal = tmp_path / "torn" / JOURNAL_FILE
    data = journal.read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    journal.write_bytes(data[:last + (len(data) - last) // 2])        # cut the last record mid-line
    messages = []
    runner = LeastSquaresRunner(problem, ROUNDS)
    resumed = run_search(_settings(), runner, tmp_path / "torn", log=messages.append)
    assert any("torn line" in m for m in messages)
    assert runner.calls == 1                     # the trial whose last record was torn runs again
    assert trial_table(resumed) == trial_table(whole)
    assert journal.read_bytes().endswith(b"\n")
    # and a second resume reads it cleanly, running nothing
    again = LeastSquaresRunner(problem, ROUNDS)
    assert trial_table(run_search(_settings(), again, tmp_path / "torn")) == trial_table(whole) and again.calls == 0


def test_a_huge_range_is_refused_before_it_is_materialised():
    import time

    from fedhet.lab.tuning.errors import TuneError
    from fedhet.lab.tuning.space import grid_points

    started = time.monotonic()
    with pytest.raises(TuneError, match="N = 1000000000 values; allowed: at most 10000"):
        parse_parameter("client.learning_rate=lin:0.01:1:1000000000")
    space = [parse_parameter("client.learning_rate=lin:0.01:1:1000"), parse_parameter("server.learning_rate=lin:0.1:1:1000")]
    with pytest.raises(TuneError, match="the grid has 1000000 points"):
        grid_points(space)
    assert time.monotonic() - started < 5


def test_parallel_trials_that_failed_for_the_machine_stop_the_search(config, tmp_path, monkeypatch, capsys):
    """--jobs > 1: trials are sweep workers; a worker that exits 1 (a full disk, no memory) stops the
    search and no trial of the batch is recorded, so the same command runs them again."""
    pytest.importorskip("optuna")
    import fedhet.lab.sweep.execute as sweep_module
    from fedhet.lab.sweep.outcome import RunOutcome

    real = sweep_module.run_sweep

    def full_disk(plan, **kwargs):
        return dataclasses.replace(real(plan, **kwargs), outcomes=[
            RunOutcome(run, "failed", error=f"exit status 1; end of {run.run_dir}/sweep.log:\n"
                                           f"fedhet: {run.run_dir}/checkpoint.pt: no space left on the device (ENOSPC)",
                       exit_status=1)
            for run in plan.runs])

    args = ["tune", str(config), "--param", "client.learning_rate=0.01,0.3,3", "--sampler", "optuna",
            "--trials", "2", "--jobs", "2", "--seed", "3", "--criterion", "train_loss@4"]
    monkeypatch.setattr(sweep_module, "run_sweep", full_disk)
    assert main([*args, "--out", str(tmp_path / "parts")]) == 2
    assert "failed for a reason of the machine" in capsys.readouterr().err
    monkeypatch.setattr(sweep_module, "run_sweep", real)
    assert main([*args, "--out", str(tmp_path / "parts")]) == 0
    parts = json.loads((tmp_path / "parts" / "trials.json").read_text())["trials"]
    assert [t["state"] for t in parts] != ["failed", "failed"] and "failed" not in [t["state"] for t in parts]


def test_worker_exit_status_tells_the_machine_from_a_bug(monkeypatch, tmp_path):
    import fedhet.lab.sweep.worker as worker

    for error, status in ((OSError(errno.ENOSPC, "No space left on device"), 1), (ZeroDivisionError("bug"), 3)):
        def fail(*args, error=error, **kwargs):
            raise error
        monkeypatch.setattr(worker, "execute_run", fail)
        assert worker.main([str(tmp_path), "--resume"]) == status


def test_a_worker_refused_for_memory_or_disk_exits_with_the_machines_status(monkeypatch, tmp_path):
    """The resource estimate's refusals (a ResourceLimitError for memory or disk, too many Ray actors) are
    the machine's, like a full disk: the sweep worker exits 1, and a worker killed before answering (the
    out-of-memory killer) counts as the machine's too, so `fedhet tune` never records them as results."""
    import fedhet.lab.sweep.execute as execute
    import fedhet.lab.sweep.worker as worker
    from fedhet.backends.ray_backend import RayActorsTooManyError
    from fedhet.engine.resources import ResourceLimitError
    from fedhet.lab.sweep.plan import PlannedRun

    for error in (ResourceLimitError("this run needs more than the machine has: disk: needs about 2 MB"),
                  RayActorsTooManyError("run.ray_actors = 100: about 25 GB, 4 GB available")):
        def fail(*args, error=error, **kwargs):
            raise error
        monkeypatch.setattr(worker, "execute_run", fail)
        assert worker.main([str(tmp_path), "--resume"]) == 1
        assert worker.run_request({"run_dir": str(tmp_path), "resume": True}, worker.DatasetCache()) == 1
    run = PlannedRun("trial-0000", tmp_path / "trial-0000", None, None, (), 1)  # type: ignore[arg-type]
    assert execute._finish_worker(run, -9).exit_status == 1            # killed by a signal
    assert execute._finish_worker(run, 2).exit_status == 2             # the run's input: a trial result


def _workers_in_this_process(todo, jobs, view, poll_seconds):
    """The sweep's worker pool with each request run by the serving worker's own code
    (fedhet.lab.sweep.worker.run_request, its messages appended to the run's sweep.log) in this process,
    so a test can fill the disk of its runs."""
    import contextlib

    import fedhet.lab.sweep.execute as execute
    import fedhet.lab.sweep.worker as worker
    from fedhet.config.schema import config_to_toml
    from fedhet.lab.sweep.plan import RESUME

    datasets = worker.DatasetCache()
    outcomes = []
    for run, state in todo:
        request = {"run_dir": str(run.run_dir), "resume": state == RESUME,
                   "config": None if state == RESUME else config_to_toml(run.config)}
        with open(run.run_dir / worker.LOG_FILE, "a") as log, contextlib.redirect_stderr(log):
            status = worker.run_request(request, datasets)
        outcomes.append(execute._finish_worker(run, status))
    return outcomes


@pytest.mark.parametrize("trials", [3, 4])
def test_a_parallel_search_refused_for_disk_leaves_its_trials_running_and_resumes_to_the_same_choice(
        config, tmp_path, monkeypatch, capsys, trials):
    """--jobs 2 with the disk full from the third trial on: the resource check refuses those trials; the
    search stops with one line instead of recording them failed, they stay RUNNING in the study, and the
    same command on a freed disk ends with the trials and the choice of the uninterrupted search. With 3
    trials the refused batch is a single trial, which the sweep runs in this process; with 4, on workers."""
    optuna = pytest.importorskip("optuna")
    import fedhet.engine.resources as resources
    import fedhet.lab.sweep.execute as execute

    monkeypatch.setattr(execute, "_run_workers", _workers_in_this_process)
    args = ["tune", str(config), "--param", "client.learning_rate=log:0.01:1:20", "--param",
            "server.learning_rate=0.5,1", "--sampler", "optuna", "--trials", str(trials), "--jobs", "2",
            "--seed", "3", "--criterion", "train_loss@4"]
    assert main([*args, "--out", str(tmp_path / "whole")]) == 0
    real = resources.available_disk
    monkeypatch.setattr(resources, "available_disk",
                        lambda path: 0 if "trial-0002" <= resources.Path(path).name else real(path))
    assert main([*args, "--out", str(tmp_path / "parts")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "failed for a reason of the machine" in err[-1] and "needs more than the machine has" in err[-1]
    assert not (tmp_path / "parts" / "best.json").exists()
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    study = optuna.load_study(study_name="fedhet-tune", storage=JournalStorage(
        JournalFileBackend(str(tmp_path / "parts" / JOURNAL_FILE))))
    states = [t.state.name for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)]
    assert states == ["COMPLETE", "COMPLETE"] + ["RUNNING"] * (trials - 2)
    monkeypatch.setattr(resources, "available_disk", real)
    assert main([*args, "--out", str(tmp_path / "parts")]) == 0
    whole = json.loads((tmp_path / "whole" / "trials.json").read_text())["trials"]
    parts = json.loads((tmp_path / "parts" / "trials.json").read_text())["trials"]
    assert parts == whole and "failed" not in [t["state"] for t in parts]
    assert json.loads((tmp_path / "parts" / "best.json").read_text())["trial"] == \
        json.loads((tmp_path / "whole" / "best.json").read_text())["trial"]
