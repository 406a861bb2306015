"""Sweep runs are tracked too: one tracked run per fedhet run, grouped by the sweep."""
import json

import pytest

from tracking_readers import as_float32, jsonl_series, run_python, same_series, tensorboard_series, wandb_history

pytest.importorskip("tensorboard")
pytest.importorskip("mlflow")
pytest.importorskip("wandb")

SWEEP = """
import io
from pathlib import Path
from small_run import SMALL
from fedhet.config.schema import config_to_toml, load_config
from fedhet.lab.sweep.plan import plan_sweep
from fedhet.lab.sweep.execute import run_sweep

base = load_config(None, [*SMALL, "run.name=grp", "run.rounds=2",
                          'run.trackers=["tensorboard", "mlflow", "wandb"]'])
Path("grp.toml").write_text(config_to_toml(base))
result = run_sweep(plan_sweep("grp.toml", seeds=[1, 2], out_dir="../sweep"), jobs=1, stream=io.StringIO())
assert not result.failed, result.failed
"""


def test_each_sweep_run_is_one_tracked_run_grouped_by_the_sweep(tmp_path):
    run_python(SWEEP, tmp_path)
    sweep_dir = tmp_path / "sweep"
    run_dirs = sorted(path.parent for path in sweep_dir.glob("*/tracking.json"))
    assert [path.name for path in run_dirs] == ["grp__seed=1", "grp__seed=2"]
    states = [json.loads((path / "tracking.json").read_text()) for path in run_dirs]

    # MLflow: one store (SQLite) in the sweep directory, one experiment named after the sweep, one run each.
    from mlflow.tracking import MlflowClient
    uri = "sqlite:///" + str((sweep_dir / "mlflow.db").resolve())
    assert {state["mlflow"]["tracking_uri"] for state in states} == {uri}
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("grp")
    runs = client.search_runs([experiment.experiment_id])
    # Named by what differs: only the seed here (a grid's values come first: test_tracking_layout.py);
    # setting and seed tags group the seeds.
    assert sorted(run.info.run_name for run in runs) == ["grp seed=1", "grp seed=2"]
    assert {run.data.tags["fedhet.sweep"] for run in runs} == {"grp"}
    assert {run.data.tags["setting"] for run in runs} == {"grp"}
    assert sorted(run.data.tags["seed"] for run in runs) == ["1", "2"]
    # What `fedhet sweep` prints at the end: TensorBoard with the short run names, MLflow's one store.
    from fedhet.engine.tracking import sweep_viewer_lines
    lines = sweep_viewer_lines([("grp__seed=1", 1, run_dirs[0]), ("grp__seed=2", 2, run_dirs[1])])
    assert lines[0].startswith("tensorboard --logdir_spec 'grp seed=1:") and "grp seed=2:" in lines[0]
    assert lines[1].startswith(f"mlflow ui --backend-store-uri {uri} --host 127.0.0.1")
    assert {run.info.run_id for run in runs} == {state["mlflow"]["run_id"] for state in states}

    # Both runs ran in one process; W&B wrote each run's files (its service's logs too) in that run's folder.
    for run_dir in run_dirs:
        assert len(list((run_dir / "wandb").glob(".cache/wandb/logs/core-debug-*.log"))) == 1
    assert [p for p in (tmp_path / "home").rglob("*")] == []

    for run_dir, state in zip(run_dirs, states):
        expected = jsonl_series(run_dir)
        # TensorBoard: one log directory per run, inside the sweep directory.
        series = tensorboard_series(run_dir / "tensorboard")
        assert same_series({k: v for k, v in series.items() if not k.startswith("summary/")}, as_float32(expected))
        # W&B: project and group are the sweep's name.
        assert state["wandb"]["project"] == "grp"
        history, run_ids, _ = wandb_history(run_dir / "wandb")
        assert run_ids == {state["wandb"]["run_id"]} and same_series(history, expected)
    groups = set()
    from wandb.proto import wandb_internal_pb2

    from tracking_readers import _wandb_records
    for run_dir in run_dirs:
        for path in (run_dir / "wandb").glob("offline-run-*/run-*.wandb"):
            for raw in _wandb_records(path):
                record = wandb_internal_pb2.Record.FromString(raw)
                if record.WhichOneof("record_type") == "run":
                    groups.add((record.run.project, record.run.run_group))
    assert groups == {("grp", "grp")}
