"""Ctrl-C names the command that resumes the interrupted run, quoted, and no resume hint where there
is nothing to resume (campaign 2026-11-24 finding M6)."""
from __future__ import annotations

import shlex

import fedhet.engine.runner as runner
from fedhet.cli import main
from small_run import small_toml


def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def test_ctrl_c_names_the_run_directory(tmp_path, monkeypatch, capsys):
    config = tmp_path / "a.toml"
    config.write_text(small_toml(name="my run", out_dir=str(tmp_path), progress=False))
    monkeypatch.setattr(runner, "run_experiment", _interrupt)
    monkeypatch.setattr(runner, "resume_run", _interrupt)
    assert main(["run", str(config)]) == 130
    expected = f"fedhet run --resume {shlex.quote(str(tmp_path / 'my run'))}"
    assert capsys.readouterr().err.strip() == f"fedhet: interrupted; resume with `{expected}`"
    assert main(["run", "--resume", str(tmp_path / "my run")]) == 130
    assert expected in capsys.readouterr().err


def test_ctrl_c_elsewhere_has_no_run_dir_placeholder(tmp_path, monkeypatch, capsys):
    import fedhet.cli as cli

    monkeypatch.setattr(cli, "_command_init", _interrupt)
    parser_args = ["init", str(tmp_path / "x.toml")]
    assert main(parser_args) == 130
    assert capsys.readouterr().err.strip() == "fedhet: interrupted"
