"""``fedhet tune`` end to end on a small Synthetic experiment: the choice never reads the test set,
and an interrupted grid search resumes to exactly the uninterrupted one's results."""
import dataclasses
import json

import pytest

import fedhet.components  # noqa: F401
from fedhet.cli import main
from fedhet.core.dataset import TensorDataset
from fedhet.core.registry import DATASETS
from fedhet.engine import runner as engine_runner

SMALL_TOML = """\
[run]
name = "tiny"
rounds = 4
eval_every = 1
checkpoint_every = 1

[data]
name = "synthetic"
num_devices = 8
max_device_size = 80
validation_fraction = 0.2

[partition]
name = "natural"
num_clients = 8

[model]
name = "logreg"

[participation]
name = "uniform"
clients_per_round = 3

[client]
name = "sgd"
batch_size = 16
epochs = 1
"""
GRID = ["--param", "client.learning_rate=0.01,0.3,3"]


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(SMALL_TOML)
    return path


def _tune(config, out, *extra):
    assert main(["tune", str(config), *GRID, "--out", str(out), *extra]) == 0
    return json.loads((out / "best.json").read_text()), json.loads((out / "trials.json").read_text())["trials"]


@pytest.mark.parametrize("criterion, extra", [
    ("val_accuracy", ()), ("train_loss@4", ()), ("val_accuracy_last10", ()),
    ("global_train_loss@4", ("--set", "run.global_train_loss_every=4"))])
def test_poisoned_test_labels_do_not_change_the_choice(config, tmp_path, monkeypatch, criterion, extra, capsys):
    clean_best, clean_trials = _tune(config, tmp_path / "clean", "--criterion", criterion, *extra)
    entry = DATASETS.get("synthetic")

    def poisoned(options, *, seed):
        bundle = entry.factory(options, seed=seed)
        # Every test label moved to another class: test accuracy collapses, training data untouched.
        return dataclasses.replace(bundle, test=TensorDataset(bundle.test.inputs, (bundle.test.targets + 1) % 10))

    monkeypatch.setitem(DATASETS._entries, "synthetic", dataclasses.replace(entry, factory=poisoned))
    poisoned_best, poisoned_trials = _tune(config, tmp_path / "poisoned", "--criterion", criterion, *extra)
    assert poisoned_best["values"] == clean_best["values"]
    assert [t[criterion] for t in poisoned_trials] == [t[criterion] for t in clean_trials]
    # The poison took effect: the recorded (unused) test accuracies differ.
    assert [t["test_accuracy (not used)"] for t in poisoned_trials] != [t["test_accuracy (not used)"]
                                                                        for t in clean_trials]


def test_grid_search_interrupted_mid_trial_resumes_to_the_uninterrupted_result(config, tmp_path, monkeypatch):
    _tune(config, tmp_path / "whole", "--criterion", "val_loss")
    original = engine_runner.RunHandle.run_round
    calls = {"n": 0}

    def crashing(self):
        calls["n"] += 1
        if calls["n"] == 7:           # round 3 of the second trial, after its round-2 checkpoint
            raise KeyboardInterrupt
        return original(self)

    monkeypatch.setattr(engine_runner.RunHandle, "run_round", crashing)
    assert main(["tune", str(config), *GRID, "--out", str(tmp_path / "parts"), "--criterion", "val_loss"]) == 130
    assert not (tmp_path / "parts" / "best.json").exists()
    monkeypatch.setattr(engine_runner.RunHandle, "run_round", original)
    best, trials = _tune(config, tmp_path / "parts", "--criterion", "val_loss")
    whole_best, whole_trials = (json.loads((tmp_path / "whole" / name).read_text()) for name in ("best.json", "trials.json"))
    assert trials == whole_trials["trials"]
    assert (best["trial"], best["values"], best["value"]) == (whole_best["trial"], whole_best["values"], whole_best["value"])


def test_the_test_set_is_refused_as_a_criterion_and_val_needs_a_split(config, tmp_path, capsys):
    assert main(["tune", str(config), *GRID, "--out", str(tmp_path / "a"), "--criterion", "test_accuracy"]) == 2
    assert "the test set is never a selection criterion" in capsys.readouterr().err
    assert main(["tune", str(config), *GRID, "--out", str(tmp_path / "b"), "--criterion", "val_loss",
                 "--set", "data.validation_fraction=0"]) == 2
    assert "data.validation_fraction" in capsys.readouterr().err
    assert main(["tune", str(config), *GRID, "--out", str(tmp_path / "c"), "--criterion", "global_train_loss@4"]) == 2
    assert "run.global_train_loss_every" in capsys.readouterr().err
    assert main(["tune", str(config), *GRID, "--out", str(tmp_path / "d"), "--criterion", "val_accuracy_last10@4"]) == 2
    assert "without @ROUND" in capsys.readouterr().err


def test_another_search_in_the_same_out_dir_is_refused(config, tmp_path, capsys):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "search.json").write_text(json.dumps({"sampler": "optuna"}))
    assert main(["tune", str(config), *GRID, "--out", str(tmp_path / "out")]) == 2
    assert "holds another search" in capsys.readouterr().err
