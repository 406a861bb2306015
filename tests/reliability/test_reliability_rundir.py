"""One writer per run directory, no stale state, resume checks the configuration, --overwrite keeps
unrelated files, sweeps recover (issue 12, findings 3, 4, 5, 8 and 15)."""
from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from fedhet.engine import checkpoint as ckpt
from fedhet.engine.fingerprint import ConfigChangedError
from fedhet.engine.rundir_lock import DirectoryLock, RunDirectoryInUseError
from fedhet.engine.runner import resume_run, run_experiment
from fedhet.lab.sweep.execute import run_sweep
from fedhet.lab.sweep.plan import plan_sweep
from fedhet.lab.sweep.progress import DONE
from helpers_reliability import assert_same_run, fedhet_cli, subprocess_env, values
from small_run import StopAfter, small_toml


def _hold_lock(directory):
    """A separate process that takes ``directory``'s lock and sleeps; returns it once it holds it."""
    script = textwrap.dedent(f"""
        import sys, time
        from fedhet.engine.rundir_lock import DirectoryLock
        DirectoryLock({str(directory)!r}).acquire()
        print("held", flush=True)
        time.sleep(120)
    """)
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=subprocess_env())
    assert holder.stdout.readline().strip() == "held"
    return holder


def _stop(process):
    process.kill()
    process.wait()


def test_a_second_writer_is_refused_with_the_holders_pid(small_config, tmp_path):
    with pytest.raises(KeyboardInterrupt):
        run_experiment(small_config("run.name=cut"), callbacks=[StopAfter(3)])
    holder = _hold_lock(tmp_path / "cut")
    try:
        proc = fedhet_cli("run", "--resume", str(tmp_path / "cut"))
        assert proc.returncode != 0
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and f"in use by process {holder.pid}" in lines[0], proc.stderr
        with pytest.raises(RunDirectoryInUseError, match=str(holder.pid)):
            run_experiment(small_config("run.name=cut"), overwrite=True)
    finally:
        _stop(holder)
    # The kernel released the lock of the killed holder: the run resumes.
    resume_run(tmp_path / "cut")
    assert [r["round"] for r in values(tmp_path / "cut")] == [1, 2, 3, 4, 5, 6]


def test_two_sweeps_on_one_out_dir_are_refused(small_config, tmp_path):
    base = tmp_path / "tiny.toml"
    base.write_text(_TINY)
    holder = _hold_lock(tmp_path / "out")
    try:
        with pytest.raises(RunDirectoryInUseError, match=f"sweep directory .* process {holder.pid}"):
            run_sweep(plan_sweep(base, out_dir=tmp_path / "out"), jobs=1, stream=io.StringIO(), live=False)
    finally:
        _stop(holder)


def test_the_lock_is_exclusive_between_two_open_descriptions_and_released_on_exit(tmp_path):
    first = DirectoryLock(tmp_path).acquire()
    with pytest.raises(RunDirectoryInUseError, match=f"process {os.getpid()}"):
        DirectoryLock(tmp_path).acquire()
    first.release()
    with DirectoryLock(tmp_path) as again:
        assert again.held


def test_sweep_workers_die_with_their_parent(tmp_path):
    # A parent starts a long-sleeping child the way the sweep starts workers, then is SIGKILLed.
    script = textwrap.dedent("""
        import subprocess, sys, time
        from fedhet.lab.sweep.lifetime import die_with_parent
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], preexec_fn=die_with_parent())
        print(child.pid, flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=subprocess_env())
    child_pid = int(parent.stdout.readline())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child_pid, 0)
        except ProcessLookupError:
            return
        # A zombie re-parented to a subreaper still answers kill(0); its state says it is dead.
        try:
            with open(f"/proc/{child_pid}/stat") as stat:
                if stat.read().split(") ")[1].startswith("Z"):
                    return
        except FileNotFoundError:
            return
        time.sleep(0.1)
    os.kill(child_pid, signal.SIGKILL)
    pytest.fail("the worker outlived its parent")


def test_a_fresh_run_never_reuses_old_stores(small_config, tmp_path):
    mmap = ("client.name=scaffold", "server.name=scaffold", "run.store_mmap=true")
    run_experiment(small_config("run.name=clean", *mmap))
    run_experiment(small_config("run.name=stale", *mmap))
    stale = tmp_path / "stale"
    stores = sorted((stale / "stores").glob("store-*.bin"))
    assert stores
    for path in stores:                         # old client memories, and no checkpoint to say so
        path.write_bytes(b"\x7f" * path.stat().st_size)
    for name in (ckpt.CHECKPOINT_NAME, ckpt.PREVIOUS_NAME):
        (stale / name).unlink()
    run_experiment(small_config("run.name=stale", *mmap))
    assert_same_run(tmp_path / "clean", stale)
    # And --overwrite over a directory with a checkpoint:
    for path in sorted((stale / "stores").glob("store-*.bin")):
        path.write_bytes(b"\x7f" * path.stat().st_size)
    run_experiment(small_config("run.name=stale", *mmap), overwrite=True)
    assert_same_run(tmp_path / "clean", stale)


def test_resume_refuses_an_edited_config_and_names_the_keys(small_config, tmp_path):
    with pytest.raises(KeyboardInterrupt):
        run_experiment(small_config("run.name=cut"), callbacks=[StopAfter(3)])
    config_path = tmp_path / "cut" / "config.toml"
    original = config_path.read_text()
    edited = original.replace("learning_rate = 0.05", "learning_rate = 0.07").replace("seed = 1", "seed = 9")
    assert edited != original
    config_path.write_text(edited)
    with pytest.raises(ConfigChangedError) as error:
        resume_run(tmp_path / "cut")
    assert "client.learning_rate (0.05 -> 0.07)" in str(error.value)
    assert "run.seed (1 -> 9)" in str(error.value)
    proc = fedhet_cli("run", "--resume", str(tmp_path / "cut"))
    assert proc.returncode != 0 and len(proc.stderr.strip().splitlines()) == 1
    assert "client.learning_rate" in proc.stderr
    config_path.write_text(original)
    with pytest.raises(ConfigChangedError, match="may change only run.rounds"):
        resume_run(tmp_path / "cut", sets=["client.learning_rate=0.07"])


def test_resume_with_more_rounds_continues_the_same_run(small_config, tmp_path):
    run_experiment(small_config("run.name=long", "run.rounds=8"))
    run_experiment(small_config("run.name=short"))                    # 6 rounds, finished
    summary = resume_run(tmp_path / "short", sets=["run.rounds=8"])
    assert summary["rounds"] == 8
    assert "rounds = 8" in (tmp_path / "short" / "config.toml").read_text()
    assert_same_run(tmp_path / "long", tmp_path / "short")
    with pytest.raises(ConfigChangedError, match="may only grow"):
        resume_run(tmp_path / "short", sets=["run.rounds=4"])


def test_overwrite_keeps_unrelated_files(small_config, tmp_path):
    run_experiment(small_config("run.name=a", "run.store_mmap=true", "client.name=scaffold", "server.name=scaffold"))
    run_dir = tmp_path / "a"
    mine = [run_dir / "notes.txt", run_dir / "analysis" / "plot.png", run_dir / "stores" / "my-table.csv"]
    for path in mine:
        path.parent.mkdir(exist_ok=True)
        path.write_text("mine")
    run_experiment(small_config("run.name=a", "run.rounds=2"), overwrite=True)
    assert all(path.read_text() == "mine" for path in mine)
    assert [r["round"] for r in values(run_dir)] == [1, 2]
    assert not list((run_dir / "stores").glob("store-*.bin"))           # this run keeps no stores


_TINY = small_toml(name="tiny", rounds=4, eval_every=1, checkpoint_every=2)


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_truncated_checkpoint_in_a_sweep_is_recovered(tmp_path, overwrite):
    base = tmp_path / "tiny.toml"
    base.write_text(_TINY)
    plan = plan_sweep(base, out_dir=tmp_path / "out")
    [run] = plan.runs
    reference = tmp_path / "reference"
    run_experiment(run.config, reference)
    run.run_dir.parent.mkdir(parents=True)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(run.config, run.run_dir, callbacks=[StopAfter(3)])
    (run.run_dir / "notes.txt").write_text("mine")
    for name in (ckpt.CHECKPOINT_NAME, ckpt.PREVIOUS_NAME):        # both unusable: restart
        path = run.run_dir / name
        path.write_bytes(path.read_bytes()[:50])
    result = run_sweep(plan, jobs=1, overwrite=overwrite, stream=io.StringIO(), live=False)
    assert [o.status for o in result.outcomes] == [DONE]
    assert_same_run(reference, run.run_dir)
    assert (run.run_dir / "notes.txt").read_text() == "mine"
    assert "starting this run again from round 0" in (run.run_dir / "sweep.log").read_text()


def test_a_forked_child_that_outlives_the_writer_does_not_keep_the_lock(tmp_path):
    script = textwrap.dedent(f"""
        import os, time
        from fedhet.engine.rundir_lock import DirectoryLock
        DirectoryLock({str(tmp_path)!r}).acquire()
        child = os.fork()
        if child == 0:
            # Python code runs in the child only after the at-fork hooks (which close the lock's
            # descriptor), so this line says the child no longer holds it. Without it, a loaded machine
            # could kill the writer before the child was first scheduled (the flock was still shared).
            os.write(1, b"child ready\\n")      # one write per line: the two processes share the pipe
            time.sleep(60)
            os._exit(0)
        os.write(1, f"{{child}}\\n".encode())
        time.sleep(60)
    """)
    writer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=subprocess_env())
    lines = [writer.stdout.readline().strip(), writer.stdout.readline().strip()]
    assert "child ready" in lines, lines
    child_pid = int(next(line for line in lines if line != "child ready"))
    try:
        with pytest.raises(RunDirectoryInUseError, match=str(writer.pid)):
            DirectoryLock(tmp_path).acquire()
        _stop(writer)
        with DirectoryLock(tmp_path) as lock:       # the child still lives, the lock is free
            assert lock.held
            os.kill(child_pid, 0)
    finally:
        try:
            os.kill(child_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
