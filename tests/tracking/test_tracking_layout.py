"""The trackers' layout: prefixed metric names, headline summary values, run names and tags, viewer commands."""
import logging
import math
from pathlib import Path

from fedhet.tracking.layout import (
    HEADLINE_SUMMARY,
    headline_summary,
    metric_name,
    run_identity,
    sweep_viewer_commands,
    viewer_commands,
)


def test_metric_names_are_grouped_by_prefix():
    # Written out by hand: the names a user sees in TensorBoard and MLflow.
    expected = {
        "test_accuracy": "test/accuracy", "test_loss": "test/loss", "train_loss": "train/loss",
        "client_accuracy_worst10": "clients/accuracy_worst10", "client_accuracy_mean": "clients/accuracy_mean",
        "aware_num_nonzero": "fedaware/num_nonzero", "aware_weight_entropy": "fedaware/weight_entropy",
        "mgda_weight_entropy": "fedmgda/weight_entropy", "fedau_weight_mean": "fedau/weight_mean",
        "fednova_tau_eff": "fednova/tau_eff", "feddyn_h_norm": "feddyn/h_norm",
        "known_weight_max": "known_participation/weight_max",
        "control_variate_change": "scaffold/control_variate_change",
        "e_lud": "diag/e_lud", "update_norm": "diag/update_norm", "learning_rate": "diag/learning_rate",
        "solver_gap": "diag/solver_gap", "wall_seconds": "diag/wall_seconds", "num_participants": "diag/num_participants",
        "aware_": "diag/aware_",        # a bare prefix is not a method diagnostic
    }
    assert {key: metric_name(key) for key in expected} == expected
    from fedhet.tracking.base import numeric_items
    assert numeric_items({"round": 3, "test_accuracy": 0.5, "e_lud": 2, "note": "x"}) == {
        "test/accuracy": 0.5, "diag/e_lud": 2.0}


def test_test_metrics_sort_before_the_diagnostics_of_a_method():
    names = sorted(metric_name(key) for key in ("aware_num_nonzero", "test_accuracy", "train_loss", "e_lud"))
    # TensorBoard and MLflow show one section per prefix; test/ and train/ are sections of their own.
    assert [name.split("/")[0] for name in names] == ["diag", "fedaware", "test", "train"]


def test_only_the_headline_summary_values_are_metrics():
    summary = {"final_accuracy": 0.8, "best_accuracy": 0.9, "last10_accuracy": 0.85, "final_test_loss": 0.4,
               "rounds_to_target": None, "e_ludd": math.nan, "seconds_per_round": 0.5, "mean_update_norm": 1.0,
               "mean_aware_num_seen": 3.0, "algorithm": "fedavg", "stopped_early": False, "wall_seconds": 9.0}
    assert headline_summary(summary) == {"summary/final_accuracy": 0.8, "summary/best_accuracy": 0.9,
                                         "summary/last10_accuracy": 0.85, "summary/final_test_loss": 0.4,
                                         "summary/seconds_per_round": 0.5}
    assert len(HEADLINE_SUMMARY) <= 8


def test_run_names_lead_with_what_differs():
    sweep = {"label": "fedavgm", "assignments": {"server.learning_rate": "0.1"}, "seed": 2, "base_name": "fmnist"}
    identity = run_identity("fmnist__fedavgm__server.learning_rate=0.1__seed=2", 2, sweep)
    assert (identity.name, identity.setting, identity.seed) == (
        "fedavgm server.learning_rate=0.1 seed=2", "fedavgm server.learning_rate=0.1", 2)
    grid = run_identity("fmnist_fedavg__algorithm=fedavg__seed=2", 2,
                        {"label": None, "assignments": {"algorithm": "fedavg"}, "base_name": "fmnist_fedavg"})
    assert grid.name == "fedavg seed=2" and grid.setting == "fedavg"
    seeds_only = run_identity("grp__seed=1", 1, {"label": None, "assignments": {}, "base_name": "grp"})
    assert (seeds_only.name, seeds_only.setting) == ("grp seed=1", "grp")
    single = run_identity("quick", 0, None)
    assert (single.name, single.setting, single.seed) == ("quick seed=0", "quick", 0)


def test_viewer_commands_name_each_tool():
    run_dir = Path("/runs/sweep/a b")
    state = {"tensorboard": {"log_dir": "tensorboard"},
             "mlflow": {"tracking_uri": "file:///runs/sweep/mlruns", "run_id": "x"},
             "wandb": {"mode": "offline", "project": "p", "run_id": "y"}}
    single = viewer_commands(state, run_dir, mlflow_ui=True)
    assert single[0] == ("tensorboard --logdir '/runs/sweep/a b/tensorboard' --host 127.0.0.1   (then open "
                         "http://127.0.0.1:6006/#scalars&tagFilter=%5E(test%7Ctrain)%2F)")
    assert single[1] == "mlflow ui --backend-store-uri file:///runs/sweep/mlruns --host 127.0.0.1"
    # With mlflow-skinny alone `mlflow ui` cannot start: the line says what to install.
    skinny = viewer_commands(state, run_dir, mlflow_ui=False)[1]
    assert skinny.startswith(single[1]) and "pip install mlflow" in skinny
    assert single[2] == "wandb sync '/runs/sweep/a b/wandb'/offline-run-*"
    database = viewer_commands({"mlflow": {"tracking_uri": "sqlite:////runs/sweep/mlflow.db"}}, run_dir, mlflow_ui=True)
    assert database == ["mlflow ui --backend-store-uri sqlite:////runs/sweep/mlflow.db --host 127.0.0.1"]
    server = viewer_commands({"mlflow": {"tracking_uri": "http://127.0.0.1:5000"}}, run_dir)
    assert server == ["MLflow: open http://127.0.0.1:5000"]


def test_a_sweep_is_viewed_with_short_run_names():
    state = {"tensorboard": {}, "mlflow": {"tracking_uri": "file:///s/mlruns"}}
    runs = [(run_identity("s__algorithm=fedavg__seed=1", 1, {"assignments": {"algorithm": "fedavg"}}),
             Path("/s/s__algorithm=fedavg__seed=1"), state),
            (run_identity("s__algorithm=fedavg__seed=2", 2, {"assignments": {"algorithm": "fedavg"}}),
             Path("/s/s__algorithm=fedavg__seed=2"), state),
            (run_identity("untracked", 3), Path("/s/untracked"), {})]
    assert sweep_viewer_commands(runs, mlflow_ui=True) == [
        "tensorboard --logdir_spec 'fedavg seed=1:/s/s__algorithm=fedavg__seed=1/tensorboard,"
        "fedavg seed=2:/s/s__algorithm=fedavg__seed=2/tensorboard' --host 127.0.0.1   (then open "
        "http://127.0.0.1:6006/#scalars&tagFilter=%5E(test%7Ctrain)%2F)",
        "mlflow ui --backend-store-uri file:///s/mlruns --host 127.0.0.1"]


def test_a_tracked_run_ends_with_the_viewer_command(tmp_path, caplog):
    import pytest
    pytest.importorskip("tensorboard")
    from fedhet import load_config, run_experiment
    from small_run import SMALL

    config = load_config(None, [*SMALL, f"run.out_dir={tmp_path}", "run.name=viewed", "run.rounds=2",
                                'run.trackers=["tensorboard"]'])
    with caplog.at_level(logging.INFO, logger="fedhet"):
        run_experiment(config)
    lines = [record.getMessage() for record in caplog.records if record.getMessage().startswith("view: ")]
    assert lines == [f"view: tensorboard --logdir {tmp_path / 'viewed' / 'tensorboard'} --host 127.0.0.1   "
                     "(then open http://127.0.0.1:6006/#scalars&tagFilter=%5E(test%7Ctrain)%2F)"]
