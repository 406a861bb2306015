"""A run directory cannot make fedhet write, truncate or delete files outside it, and hints are safe
to paste (campaign 2026-11-24, findings S1-S3; docs/reliability.md)."""
from __future__ import annotations

import os
import shlex

import pytest

from fedhet.core.lock_files import LockFileError
from fedhet.engine.rundir import LinkedRunDirectoryError
from fedhet.engine.rundir_lock import DirectoryLock
from fedhet.engine.runner import run_experiment
from fedhet.lab.sweep.run_files import file_signatures, read_run_files
from small_run import StopAfter


def test_a_lock_symlink_is_refused(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("data\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    os.symlink(victim, run_dir / ".fedhet.lock")
    with pytest.raises(LockFileError, match="symbolic link"):
        DirectoryLock(run_dir).acquire()
    assert victim.read_text() == "data\n"           # untouched: neither truncated nor written


def test_lock_that_is_not_a_regular_file_is_refused(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    os.mkfifo(run_dir / ".fedhet.lock")
    with pytest.raises(LockFileError, match="not a regular file"):
        DirectoryLock(run_dir).acquire()


def test_a_resume_through_a_planted_lock_link_leaves_the_target(small_config, tmp_path):
    with pytest.raises(KeyboardInterrupt):
        run_experiment(small_config("run.name=a"), callbacks=[StopAfter(2)])
    victim = tmp_path / "victim.txt"
    victim.write_text("data\n")
    (tmp_path / "a" / ".fedhet.lock").unlink()
    os.symlink(victim, tmp_path / "a" / ".fedhet.lock")
    with pytest.raises(LockFileError):
        run_experiment(small_config("run.name=a"), resume=True)
    assert victim.read_text() == "data\n"


@pytest.mark.parametrize("folder", ["stores", "tensorboard", "wandb"])
def test_a_symlinked_store_folder_is_refused(small_config, tmp_path, folder):
    outside = tmp_path / "ext"
    outside.mkdir()
    (outside / "store-important.bin").write_text("precious")
    (tmp_path / "b").mkdir()
    os.symlink(outside, tmp_path / "b" / folder)
    with pytest.raises(LinkedRunDirectoryError, match=f"{folder} is a symbolic link"):
        run_experiment(small_config("run.name=b", "run.store_mmap=true"))
    assert sorted(p.name for p in outside.iterdir()) == ["store-important.bin"]
    assert (outside / "store-important.bin").read_text() == "precious"


def test_shipped_run_files_skip_symlinked_files(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text("{}\n")
    os.symlink(secret, run_dir / "summary.json")
    assert set(file_signatures(run_dir)) == {"metrics.jsonl"}
    assert read_run_files(run_dir, ["summary.json", "metrics.jsonl"]) == {"metrics.jsonl": b"{}\n"}


def test_resume_hint_quotes_the_path(small_config, tmp_path):
    name = "$(touch PWNED)"
    run_experiment(small_config(f"run.name={name}", "run.rounds=1"))
    with pytest.raises(FileExistsError) as caught:
        run_experiment(small_config(f"run.name={name}", "run.rounds=1"))
    # The command line's message (a Python caller's names fedhet.resume_run with the path's repr).
    hint = caught.value.command_line_message().split("`")[1]
    assert hint == f"fedhet run --resume {shlex.quote(str(tmp_path / name))}"
    assert shlex.split(hint)[-1] == str(tmp_path / name)       # one word, nothing to expand


def test_a_symlinked_store_file_is_refused_on_resume(small_config, tmp_path):
    sets = ("run.name=s", "run.store_mmap=true", "client.name=scaffold", "server.name=scaffold")
    with pytest.raises(KeyboardInterrupt):
        run_experiment(small_config(*sets), callbacks=[StopAfter(2)])
    stores = sorted((tmp_path / "s" / "stores").glob("store-*.bin"))
    live = [p for p in stores if ".snapshot-" not in p.name]
    assert live
    victim = tmp_path / "victim.bin"
    victim.write_bytes(b"precious")
    live[0].unlink()
    os.symlink(victim, live[0])
    from fedhet.core.store import StoreFileError

    with pytest.raises(StoreFileError, match="symbolic link"):
        run_experiment(small_config(*sets), resume=True)
    assert victim.read_bytes() == b"precious"
