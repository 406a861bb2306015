"""A sweep run's log and the directory lock are never written through a planted symbolic link,
hard link or FIFO, and the sweep's closing hint is safe to paste (docs/reliability.md)."""
from __future__ import annotations

import io
import os
import shlex
import threading

import pytest

from fedhet.core.lock_files import LockFileError
from fedhet.core.log_files import UnsafeLogFileError, open_log_for_append, read_log_tail
from fedhet.engine.rundir_lock import DirectoryLock
from fedhet.lab.commands.sweep import report_hint, sweep_command
from fedhet.lab.sweep.execute import run_sweep
from fedhet.lab.sweep.outcome import tail_of
from fedhet.lab.sweep.plan import plan_sweep
from fedhet.lab.sweep.worker import serve
from small_run import small_toml


def _victim(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("victim line\n")
    return victim


def _plan(tmp_path, **run):
    base = tmp_path / "tiny.toml"
    base.write_text(small_toml(name="tiny", rounds=2, eval_every=1, checkpoint_every=2, **run))
    return plan_sweep(base, out_dir=tmp_path / "out")


@pytest.mark.parametrize("link", ["symbolic", "hard"])
def test_a_sweep_log_link_is_refused_and_its_target_untouched(tmp_path, link):
    victim = _victim(tmp_path)
    plan = _plan(tmp_path)
    [run] = plan.runs
    run.run_dir.mkdir(parents=True)
    (os.symlink if link == "symbolic" else os.link)(victim, run.run_dir / "sweep.log")
    with pytest.raises(UnsafeLogFileError, match="sweep.log"):
        run_sweep(plan, jobs=1, stream=io.StringIO(), live=False)
    assert victim.read_text() == "victim line\n"
    assert not (run.run_dir / "metrics.jsonl").exists()          # refused before the run started


def test_a_sweep_log_fifo_is_refused_without_waiting(tmp_path):
    plan = _plan(tmp_path)
    [run] = plan.runs
    run.run_dir.mkdir(parents=True)
    os.mkfifo(run.run_dir / "sweep.log")
    with pytest.raises(UnsafeLogFileError, match="not a regular file"):
        run_sweep(plan, jobs=1, stream=io.StringIO(), live=False)


def test_the_sweep_command_names_a_planted_log_in_one_line(tmp_path, capsys):
    from fedhet.cli import main

    victim = _victim(tmp_path)
    plan = _plan(tmp_path)
    [run] = plan.runs
    run.run_dir.mkdir(parents=True)
    os.symlink(victim, run.run_dir / "sweep.log")
    status = main(["sweep", str(tmp_path / "tiny.toml"), "--out", str(tmp_path / "out"), "--jobs", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert err[-1].startswith("fedhet: ") and "sweep.log is a symbolic link" in err[-1]
    assert victim.read_text() == "victim line\n"


@pytest.mark.parametrize("kind", ["symbolic", "hard", "fifo"])
def test_the_log_writers_and_reader_refuse_what_is_not_the_runs_own_file(tmp_path, kind):
    victim = _victim(tmp_path)
    log = tmp_path / "sweep.log"
    {"symbolic": lambda: os.symlink(victim, log), "hard": lambda: os.link(victim, log),
     "fifo": lambda: os.mkfifo(log)}[kind]()
    done = threading.Event()

    def attempts():
        with pytest.raises(UnsafeLogFileError):
            open_log_for_append(log)
        with pytest.raises(UnsafeLogFileError):
            read_log_tail(log)
        done.set()

    worker = threading.Thread(target=attempts, daemon=True)
    worker.start()
    worker.join(10)
    assert done.is_set(), "opening a planted log blocked"       # a FIFO is refused, not waited on
    assert "fedhet appends to this log" in tail_of(log)           # the failure report says why
    assert victim.read_text() == "victim line\n"


def test_a_serving_worker_refuses_a_planted_log_and_answers(tmp_path):
    victim = _victim(tmp_path)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    os.symlink(victim, run_dir / "sweep.log")
    replies = io.StringIO()
    serve(iter(['{"run_dir": "%s", "resume": true, "config": null}\n' % run_dir]), replies)
    assert '"status": 2' in replies.getvalue()
    assert victim.read_text() == "victim line\n"


def test_a_sweep_log_that_is_the_runs_own_file_is_appended_to(tmp_path):
    log = tmp_path / "sweep.log"
    log.write_text("earlier\n")
    fd = open_log_for_append(log)
    os.write(fd, b"later\n")
    os.close(fd)
    assert read_log_tail(log) == "earlier\nlater"


def test_a_hard_linked_lock_is_refused_and_its_target_untouched(tmp_path):
    victim = _victim(tmp_path)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    os.link(victim, run_dir / ".fedhet.lock")
    with pytest.raises(LockFileError, match="hard link"):
        DirectoryLock(run_dir).acquire()
    assert victim.read_text() == "victim line\n"               # neither truncated nor written


def test_the_sweeps_report_hint_quotes_its_paths(tmp_path):
    out = tmp_path / "o$(touch PWN2)"
    hint = report_hint(out)
    words = shlex.split(hint)
    assert words == ["fedhet", "report", str(out), "--out", str(out / "report")]


def test_the_sweep_prints_the_quoted_report_hint(tmp_path):
    base = tmp_path / "tiny.toml"
    base.write_text(small_toml(name="tiny", rounds=1, eval_every=1, checkpoint_every=1))
    out = tmp_path / "o$(touch PWN2)"
    stderr = io.StringIO()
    assert sweep_command(str(base), out=str(out), jobs=1, stdout=io.StringIO(), stderr=stderr) == 0
    [line] = [line for line in stderr.getvalue().splitlines() if line.startswith("report:")]
    assert line == f"report:  {report_hint(out)}"
    assert shlex.split(line)[3] == str(out)
