"""Shipping a run directory as data (fedhet.lab.sweep.run_files): what is copied, the write order that
keeps the directory resumable, paths that would leave the directory refused."""
from __future__ import annotations

import pytest

import fedhet.lab.sweep.run_files as run_files
from fedhet.engine.rundir_lock import LOCK_NAME
from fedhet.lab.sweep.run_files import ChangeTracker, RunFilesError, append_log, read_run_files, write_run_files


def _populate(run_dir):
    (run_dir / "stores").mkdir(parents=True)
    (run_dir / "config.toml").write_text("[run]\n")
    (run_dir / "checkpoint.pt").write_bytes(b"\x00ckpt")
    (run_dir / "stores" / "store-momentum.bin").write_bytes(b"\x01" * 16)
    (run_dir / LOCK_NAME).write_text("123")
    (run_dir / ".metrics.jsonl.abc123.tmp").write_text("half")
    (run_dir / "sweep.log").write_text("log line\n")


def test_read_copies_run_files_but_not_lock_temporaries_or_log(tmp_path):
    _populate(tmp_path / "run")
    files = read_run_files(tmp_path / "run")
    assert files == {"checkpoint.pt": b"\x00ckpt", "config.toml": b"[run]\n",
                     "stores/store-momentum.bin": b"\x01" * 16}
    write_run_files(tmp_path / "copy", files)
    assert read_run_files(tmp_path / "copy") == files


def test_change_tracker_reports_changed_new_and_removed_files(tmp_path):
    run_dir = tmp_path / "run"
    _populate(run_dir)
    tracker = ChangeTracker(run_dir)
    first, removed = tracker.changes()
    assert set(first) == {"checkpoint.pt", "config.toml", "stores/store-momentum.bin"} and removed == []
    assert tracker.changes() == ({}, [])
    # An atomic rewrite (new inode), a new file and a removed one.
    (run_dir / "checkpoint.pt.new").write_bytes(b"\x00ckpt2")
    (run_dir / "checkpoint.pt.new").replace(run_dir / "checkpoint.pt")
    (run_dir / "metrics.jsonl").write_text("{}\n")
    (run_dir / "stores" / "store-momentum.bin").unlink()
    changed, removed = tracker.changes()
    assert changed == {"checkpoint.pt": b"\x00ckpt2", "metrics.jsonl": b"{}\n"}
    assert removed == ["stores/store-momentum.bin"]


def test_write_order_keeps_directory_resumable(tmp_path, monkeypatch):
    order = []
    real = run_files.atomic_write_bytes
    monkeypatch.setattr(run_files, "atomic_write_bytes", lambda path, data: (order.append(path.name), real(path, data)))
    (tmp_path / "stores").mkdir()
    (tmp_path / "stores" / "store-m.snapshot-1.bin").write_bytes(b"old")
    write_run_files(tmp_path, {"summary.json": b"{}", "checkpoint.pt": b"c", "checkpoint.prev.pt": b"p",
                               "metrics.jsonl": b"m", "stores/store-m.snapshot-2.bin": b"new"},
                    removed=["stores/store-m.snapshot-1.bin"])
    # Ordinary files, then the previous and the latest checkpoint, and the summary (run finished) last.
    assert order == ["metrics.jsonl", "store-m.snapshot-2.bin", "checkpoint.prev.pt", "checkpoint.pt", "summary.json"]
    assert not (tmp_path / "stores" / "store-m.snapshot-1.bin").exists()
    assert (tmp_path / "stores" / "store-m.snapshot-2.bin").read_bytes() == b"new"


@pytest.mark.parametrize("name", ["../escape", "/etc/passwd", "stores/../../x", LOCK_NAME, "sweep.log"])
def test_paths_outside_the_run_directory_are_refused(tmp_path, name):
    with pytest.raises(RunFilesError, match="not a plain relative path"):
        write_run_files(tmp_path / "run", {name: b"x"})
    assert not (tmp_path / "escape").exists()


def test_append_log_adds_lines(tmp_path):
    append_log(tmp_path, ["one", "two\n"])
    append_log(tmp_path, [])
    append_log(tmp_path, ["three"])
    assert (tmp_path / "sweep.log").read_text() == "one\ntwo\nthree\n"
