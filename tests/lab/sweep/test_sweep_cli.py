"""The `fedhet sweep` and `fedhet report` subcommands: output, exit codes, errors."""
from __future__ import annotations

from fedhet.cli import main


def test_sweep_dry_run_lists_runs(tiny_config, tmp_path, capsys):
    code = main(["sweep", str(tiny_config), "--grid", "server.learning_rate=0.5,1", "--seeds", "1,2",
                 "--out", str(tmp_path / "out"), "--dry-run"])
    captured = capsys.readouterr()
    assert code == 0
    assert captured.out.splitlines() == [f"new      tiny__server.learning_rate={lr}__seed={s}"
                                         for lr in ("0.5", "1") for s in (1, 2)]
    assert "4 runs" in captured.err
    assert not (tmp_path / "out").exists()


def test_sweep_input_errors_exit_2(tiny_config, tmp_path, capsys):
    assert main(["sweep", str(tiny_config), "--grid", "server.learning_rate"]) == 2
    assert "section.key=v1" in capsys.readouterr().err
    assert main(["sweep", str(tiny_config), "--seeds", "x"]) == 2
    assert main(["sweep", str(tiny_config), "--only", "a"]) == 2
    assert "--variants" in capsys.readouterr().err
    assert main(["sweep", str(tmp_path / "nope.toml")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_sweep_then_report(tiny_config, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["sweep", str(tiny_config), "--seeds", "1,2", "--out", str(out), "--jobs", "1"]) == 0
    captured = capsys.readouterr()
    assert "2 ran, 0 already finished, 0 failed" in captured.err
    assert f"fedhet report {out} --out {out / 'report'}" in captured.err
    assert main(["report", str(out), "--out", str(tmp_path / "report"), "--target", "0.3,0.5"]) == 0
    captured = capsys.readouterr()
    assert "| fedavg | 2 |" in captured.out
    assert "rounds to 30%" in captured.out and "rounds to 50%" in captured.out
    assert f"HTML report:     {(tmp_path / 'report' / 'report.html').resolve()}" in captured.out
    for name in ("report.md", "report.json", "report.html"):
        assert (tmp_path / "report" / name).is_file()


def test_report_errors_exit_2(tmp_path, capsys):
    (tmp_path / "plain").mkdir()
    assert main(["report", str(tmp_path / "plain"), "--out", str(tmp_path / "r")]) == 2
    assert "not a fedhet run directory" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "plain"), "--out", str(tmp_path / "r"), "--target", "abc"]) == 2
    assert "--target" in capsys.readouterr().err
