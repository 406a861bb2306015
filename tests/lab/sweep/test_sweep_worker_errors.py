"""Issue 12, finding 13 in sweeps: a worker's log ends with the one-line message of a user error,
and keeps the traceback of a bug."""
from __future__ import annotations

import io

from fedhet.config.schema import config_to_toml, load_config
from fedhet.lab.sweep import worker


def _main_with(monkeypatch, tmp_path, capsys, config):
    monkeypatch.setattr("sys.stdin", io.StringIO(config_to_toml(config)))
    status = worker.main([str(tmp_path / "run")])
    return status, capsys.readouterr().err


def test_worker_logs_a_user_error_as_one_line(monkeypatch, tmp_path, capsys):
    config = load_config(None, ["data.name=fmnist", "data.root=/nonexistent/fm", f"run.out_dir={tmp_path}"])
    status, err = _main_with(monkeypatch, tmp_path, capsys, config)
    lines = [line for line in err.splitlines() if not line.startswith("backend: ")]
    assert status == 2 and "Traceback" not in err
    assert len(lines) == 1 and lines[0].startswith("fedhet: data.root = '/nonexistent/fm' does not hold the dataset")


def test_worker_keeps_the_traceback_of_a_bug(monkeypatch, tmp_path, capsys):
    def bug(*args, **kwargs):
        raise TypeError("a bug")

    monkeypatch.setattr(worker, "execute_run", bug)
    status, err = _main_with(monkeypatch, tmp_path, capsys, load_config(None, []))
    assert status == 3 and "Traceback" in err and "TypeError: a bug" in err
