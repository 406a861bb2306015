"""Issue 12, finding 13: every user-facing error is one line ``fedhet: ...`` with a non-zero exit;
tracebacks only with ``--debug``."""
from __future__ import annotations

import errno
import subprocess
import sys
from pathlib import Path

import pytest

from fedhet import cli
from fedhet.error_lines import EXIT_INTERNAL_ERROR, EXIT_OS_ERROR, EXIT_USER_ERROR, error_line, one_line
from small_run import SMALL


def _run(capsys, *argv):
    status = cli.main(list(argv))
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not line.startswith("backend: ")]
    return status, lines


def _small(tmp_path, *extra):
    base = tmp_path / "base.toml"
    base.write_text("")
    args = ["run", str(base)]
    for item in [*SMALL, f"run.out_dir={tmp_path / 'runs'}", *extra]:
        args += ["--set", item]
    return args


def _one_fedhet_line(lines):
    assert len(lines) == 1, lines
    assert lines[0].startswith("fedhet: ") and "Traceback" not in lines[0]
    return lines[0]


def test_an_out_dir_that_is_a_file_is_a_one_line_os_error(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    status, lines = _run(capsys, *_small(tmp_path, f"run.out_dir={tmp_path / 'afile'}"))
    line = _one_fedhet_line(lines)
    assert status == EXIT_OS_ERROR and "ENOTDIR" in line and "afile" in line


@pytest.mark.parametrize("code, words", [(errno.ENOSPC, "no space left"), (errno.EROFS, "read-only file system"),
                                         (errno.EACCES, "permission denied")])
def test_disk_full_read_only_and_permission_errors(tmp_path, capsys, monkeypatch, code, words):
    # The first write of a run is config.toml; make the file system refuse it as the kernel would.
    import fedhet.engine.runner as runner

    def refuse(path, text):
        raise OSError(code, "refused", str(path))

    monkeypatch.setattr(runner, "atomic_write_text", refuse)
    status, lines = _run(capsys, *_small(tmp_path, "run.name=x"))
    line = _one_fedhet_line(lines)
    assert status == EXIT_OS_ERROR and words in line and errno.errorcode[code] in line and "config.toml" in line


def test_divergence_and_a_missing_dataset_are_one_line_user_errors(tmp_path, capsys):
    status, lines = _run(capsys, *_small(tmp_path, "run.name=d", "client.learning_rate=1e30"))
    assert status == EXIT_USER_ERROR and _one_fedhet_line(lines).startswith("fedhet: round 1 diverged: ")
    base = tmp_path / "base.toml"
    status, lines = _run(capsys, "run", str(base), "--set", "data.name=fmnist", "--set", "data.root=/nonexistent/fm",
                         "--set", f"run.out_dir={tmp_path / 'runs'}")
    line = _one_fedhet_line(lines)
    assert status == EXIT_USER_ERROR and "data.root = '/nonexistent/fm' does not hold the dataset" in line


def test_report_on_malformed_files_is_a_one_line_user_error(tmp_path, capsys):
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "config.toml").write_bytes(b"\xff\xfe not text")
    status, lines = _run(capsys, "report", str(run_dir), "--out", str(tmp_path / "rep"))
    assert status == EXIT_USER_ERROR and len(lines) == 1 and "not UTF-8 text" in lines[0]
    (run_dir / "config.toml").write_text("[run]\nrounds = 2\n")
    (run_dir / "metrics.jsonl").write_text('{"round": 1, "test_accuracy": "high"}\n')
    status, lines = _run(capsys, "report", str(run_dir), "--out", str(tmp_path / "rep"))
    assert status == EXIT_USER_ERROR and len(lines) == 1 and "record 1 is malformed: test_accuracy" in lines[0]


def test_a_bug_is_one_line_pointing_to_debug_and_debug_shows_the_traceback(tmp_path, capsys, monkeypatch):
    import fedhet.engine.runner as runner

    def bug(*args, **kwargs):
        raise TypeError("unsupported operand")

    monkeypatch.setattr(runner, "build_federation", bug)
    status, lines = _run(capsys, *_small(tmp_path, "run.name=b"))
    line = _one_fedhet_line(lines)
    assert status == EXIT_INTERNAL_ERROR and "internal error (TypeError: unsupported operand)" in line
    assert "--debug" in line
    with pytest.raises(TypeError, match="unsupported operand"):
        cli.main(["--debug", *_small(tmp_path, "run.name=b")])


def test_multi_line_messages_are_made_one_line():
    assert one_line("Searched:\n  /a: missing\n  /b: missing\nFix it.") == "Searched: /a: missing; /b: missing; Fix it."
    line, status = error_line(FileExistsError("run directory x already holds a run"))
    assert (line, status) == ("fedhet: run directory x already holds a run", EXIT_USER_ERROR)


def test_the_installed_command_prints_no_traceback(tmp_path):
    """One real process, as a user runs it: stderr is exactly one line."""
    env = {"PYTHONPATH": str(Path(cli.__file__).parents[1]), "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-m", "fedhet.cli", "check", "--set", "run.name=a\nb"],
                            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert result.returncode == EXIT_USER_ERROR
    assert result.stderr.splitlines() == [
        "fedhet: configuration error: run.name = 'a\\nb': printable characters only (no newline, tab, NUL or "
        "other control character)"]
