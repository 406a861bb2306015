"""Temporary directories of killed processes are removed by the next process (campaign 2026-11-24
finding L4: a force-cancelled Ray sweep task left its fedhet-run-* directory with checkpoints)."""
import subprocess
import sys

from fedhet.core.tempdirs import owned_temp_dir, remove_orphaned_temp_dirs


def test_the_temp_dir_of_a_dead_process_is_removed_and_live_ones_kept(tmp_path):
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                           text=True, check=True)
    dead_pid = int(child.stdout)          # exited: its PID names no process (unless reused at once)
    orphan = tmp_path / f"fedhet-run-{dead_pid}-abc123"
    (orphan / "run").mkdir(parents=True)
    (orphan / "run" / "checkpoint.pt").write_bytes(b"x")
    mine = owned_temp_dir("fedhet-run-", parent=str(tmp_path))
    other = tmp_path / "fedhet-run-notapid"
    other.mkdir()
    removed = remove_orphaned_temp_dirs("fedhet-run-", parent=str(tmp_path))
    assert removed == [orphan] and not orphan.exists()
    assert mine.is_dir() and other.is_dir()
