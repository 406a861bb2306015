"""The command line's papercuts of issue 24, each fixed: Hydra-style overrides, messages that name the
mistake, `fedhet options` without repetition, `| head`, progress lines, did-you-mean."""
from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from fedhet.cli import main
from fedhet.engine.callbacks import ProgressBar
from small_run import small_toml

ROOT = Path(__file__).resolve().parents[2]


def _config(tmp_path) -> Path:
    path = tmp_path / "small.toml"
    path.write_text(small_toml(name="small", out_dir=str(tmp_path / "runs"), rounds=2, progress=False))
    return path


def test_key_value_words_after_the_config_are_overrides(tmp_path, capsys):
    config = _config(tmp_path)
    assert main(["check", str(config), "run.rounds=7", "client.learning_rate=0.2"]) == 0
    printed = capsys.readouterr().out
    assert "rounds = 7" in printed and "learning_rate = 0.2" in printed
    assert main(["run", str(config), "run.rounds=3", "--quiet"]) == 0
    records = (tmp_path / "runs" / "small" / "metrics.jsonl").read_text().splitlines()
    assert json.loads(records[-1])["round"] == 3
    capsys.readouterr()
    assert main(["run", "--resume", str(tmp_path / "runs" / "small"), "run.rounds=4"]) == 0
    assert json.loads((tmp_path / "runs" / "small" / "summary.json").read_text())["rounds"] == 4
    capsys.readouterr()
    assert main(["run", str(config), "rounds"]) == 2
    assert "only KEY=VALUE overrides may follow" in capsys.readouterr().err


def test_a_list_option_given_a_word_gets_an_example(capsys):
    assert main(["check", "--set", "run.trackers=tensorboard"]) == 2
    err = capsys.readouterr().err
    assert "expected list of str" in err and "--set 'run.trackers=[\"tensorboard\"]'" in err
    assert 'trackers = ["tensorboard"] in the file' in err


def test_an_abbreviated_key_gets_did_you_mean(capsys):
    assert main(["check", "--set", "client.lr=0.1"]) == 2
    assert "did you mean client.learning_rate?" in capsys.readouterr().err
    assert main(["check", "--set", "client.bs=8"]) == 2
    assert "did you mean client.batch_size?" in capsys.readouterr().err


def test_options_server_lists_the_shared_options_once(capsys):
    assert main(["options", "server"]) == 0
    out = capsys.readouterr().out
    assert out.count("server.aware_alpha ") == 1 and out.count("server.aware_solver_tol ") == 1
    assert "[server] name = 'fedaware'" in out and "server.alpha " in out
    assert len(out.splitlines()) < 150
    # One component's listing stays complete.
    assert main(["options", "server", "fedavg"]) == 0
    assert "server.aware_alpha " in capsys.readouterr().out
    assert main(["options", "client"]) == 0
    assert capsys.readouterr().out.count("client.batch_size ") == 1


def test_options_algorithm_lists_the_pairs(capsys):
    assert main(["options", "algorithm"]) == 0
    out = capsys.readouterr().out
    assert "algorithm = 'scaffold': client 'scaffold' + server 'scaffold'" in out
    assert "algorithm = 'fedavg': client 'sgd' + server 'fedavg'" in out
    assert main(["options", "algorithm", "fedprox_typo"]) == 2
    assert "unknown algorithm" in capsys.readouterr().err


def test_options_into_head_ends_quietly(tmp_path):
    err = tmp_path / "err.txt"
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(["bash", "-c", f"'{sys.executable}' -m fedhet.cli options 2>'{err}' | head -n 1"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.stdout.startswith("[run]")
    assert err.read_text() == "", err.read_text()


def test_grid_values_with_spaces_or_brackets_are_named_as_mistakes(tmp_path, capsys):
    config = _config(tmp_path)
    assert main(["sweep", str(config), "--grid", "client.learning_rate=0.1", "0.2", "--dry-run"]) == 2
    assert "comma-separated without spaces: --grid client.learning_rate=0.1,0.2" in capsys.readouterr().err
    assert main(["sweep", str(config), "--grid", "algorithm=[fedavg,scaffold]", "--dry-run"]) == 2
    assert "without brackets: --grid algorithm=fedavg,scaffold" in capsys.readouterr().err
    # A list option's values, each bracketed, are still a grid.
    assert main(["sweep", str(config), "--grid", 'server.aware_momentum_layers=[],["weight"]', "--dry-run", "--set", "server.aware=true",
                 "--out", str(tmp_path / "out")]) == 0


def test_unknown_flags_still_get_one_line(capsys):
    assert main(["options", "--nope"]) == 2
    assert "unrecognized arguments: --nope" in capsys.readouterr().err


def test_progress_lines_give_the_round_of_the_accuracy_they_show():
    stream = io.StringIO()
    bar = ProgressBar(stream)
    run = SimpleNamespace(config=SimpleNamespace(run=SimpleNamespace(rounds=10, name="r")), next_round=0)
    bar.on_run_start(run)
    for round_number in range(1, 11):
        record = {"round": round_number}
        if round_number in (3, 6, 10):
            record["test_accuracy"] = round_number / 100
        bar.on_round_end(run, record)
    lines = stream.getvalue().splitlines()
    assert lines[3].startswith("[r] round 4/10  acc 0.0300 (round 3)")
    assert lines[5].startswith("[r] round 6/10  acc 0.0600  ")
    assert lines[-1].startswith("[r] round 10/10  acc 0.1000  ")


def test_options_write_none_as_a_config_file_does_never_null(capsys):
    assert main(["options"]) == 0
    listing = capsys.readouterr().out
    assert "default none" in listing and "default null" not in listing
