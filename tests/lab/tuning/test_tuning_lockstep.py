"""``fedhet tune --lockstep`` and ``fedhet tune-claims --lockstep``: a grid's trials trained in lockstep choose the
same point with the same trial values (float64, 1e-9) as trials alone; Optuna's one-at-a-time trials run alone and
say so in one line; a wrong value is refused in one line."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from test_tuning_command import GRID, SMALL_TOML
from test_tuning_staged import BASE, PLAN, PROTOCOLS

from fedhet.cli import main
from small_run import skip_run_plots

CRITERION = "val_loss"


@pytest.fixture
def config(tmp_path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(SMALL_TOML)
    return path


def _same(values, references):
    assert len(values) == len(references) > 0
    for value, reference in zip(values, references):
        if isinstance(reference, float) and math.isfinite(reference):
            assert value == pytest.approx(reference, rel=1e-9, abs=1e-12)
        else:
            assert value == reference


def _backends(trials_dir: Path) -> set[str]:
    return {json.loads(path.read_text())["backend"] for path in trials_dir.glob("*/summary.json")}


@pytest.mark.slow
def test_grid_trials_in_lockstep_choose_the_same_point_with_the_same_values(config, tmp_path, monkeypatch):
    skip_run_plots(monkeypatch)
    results = {}
    for lockstep in ("off", "on"):
        out = tmp_path / lockstep
        assert main(["tune", str(config), *GRID, "--criterion", CRITERION, "--set", "run.dtype=float64",
                     "--out", str(out), "--lockstep", lockstep]) == 0
        trials = json.loads((out / "trials.json").read_text())["trials"]
        results[lockstep] = (json.loads((out / "best.json").read_text()), trials)
    (best_alone, alone), (best_together, together) = results["off"], results["on"]
    assert best_together["values"] == best_alone["values"] and best_together["trial"] == best_alone["trial"]
    assert [t["state"] for t in together] == [t["state"] for t in alone]
    _same([t[CRITERION] for t in together], [t[CRITERION] for t in alone])
    assert _backends(tmp_path / "on" / "trials") == {"lockstep"}
    assert "lockstep" not in _backends(tmp_path / "off" / "trials")


def test_optuna_one_trial_at_a_time_runs_alone_and_says_so_once(config, tmp_path, monkeypatch, capsys):
    pytest.importorskip("optuna")
    skip_run_plots(monkeypatch)
    out = tmp_path / "out"
    assert main(["tune", str(config), "--param", "client.learning_rate=0.01,0.3", "--sampler", "optuna",
                 "--trials", "2", "--criterion", "train_loss@4", "--out", str(out), "--lockstep", "on"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "lockstep" in line]
    assert len(lines) == 1 and "Optuna" in lines[0] and "one at a time" in lines[0]
    assert len(_backends(out / "trials")) == 1 and "lockstep" not in _backends(out / "trials")


@pytest.mark.parametrize("command", ["sweep", "tune", "tune-claims", "claims"])
def test_a_wrong_lockstep_value_is_refused_in_one_line(command, config, tmp_path, capsys):
    args = {"sweep": ["sweep", str(config)], "tune": ["tune", str(config), *GRID],
            "tune-claims": ["tune-claims", "--plan", str(tmp_path / "none.toml")],
            "claims": ["claims", "run", "--claims", str(tmp_path / "none")]}[command]
    assert main([*args, "--out", str(tmp_path / "out"), "--lockstep", "maybe"]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "lockstep" in error and "'maybe'" in error and "'off', 'on', 'auto'" in error
    assert not (tmp_path / "out").exists()


def test_tune_claims_grids_in_lockstep_choose_the_same_points(tmp_path, monkeypatch):
    skip_run_plots(monkeypatch)
    (tmp_path / "base.toml").write_text(BASE.replace("[run]\n", '[run]\ndtype = "float64"\n', 1))
    (tmp_path / "protocols.toml").write_text(PROTOCOLS)
    (tmp_path / "tuning.toml").write_text(PLAN)
    results = {}
    for lockstep in ("off", "on"):
        out = tmp_path / lockstep
        assert main(["tune-claims", "--plan", str(tmp_path / "tuning.toml"), "--tier", "quick", "--out", str(out),
                     "--lockstep", lockstep]) == 0
        results[lockstep] = json.loads((out / "results.json").read_text())["searches"][0]
    alone, together = results["off"], results["on"]
    assert together["chosen"] == alone["chosen"] and together["extensions"] == alone["extensions"]
    assert [p["values"] for p in together["points"]] == [p["values"] for p in alone["points"]]
    _same([p["criterion"] for p in together["points"]], [p["criterion"] for p in alone["points"]])
    assert _backends(tmp_path / "on" / "p" / "a" / "stage-1" / "trials") == {"lockstep"}
