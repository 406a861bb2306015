"""One tiny run with all three trackers: what each stored equals metrics.jsonl, and nothing was
written outside the run's output folder."""
import json
import math

import pytest

from tracking_readers import (
    as_float32,
    isolated_env,
    jsonl_series,
    mlflow_series,
    run_python,
    same_series,
    tensorboard_raw_steps,
    tensorboard_series,
    wandb_history,
)

pytest.importorskip("tensorboard")
pytest.importorskip("mlflow")
pytest.importorskip("wandb")

RUN = """
from small_run import SMALL
from fedhet import load_config, run_experiment
config = load_config(None, [*SMALL, "run.out_dir=../out", "run.name=tiny", "run.rounds=5",
                            'run.trackers=["tensorboard", "mlflow", "wandb"]'])
run_experiment(config)
"""


@pytest.fixture(scope="module")
def tracked(tmp_path_factory):
    root = tmp_path_factory.mktemp("tracked")
    run_python(RUN, root)
    run_dir = root / "out" / "tiny"
    return root, run_dir, json.loads((run_dir / "tracking.json").read_text())


def test_tensorboard_scalars_equal_metrics_jsonl(tracked):
    _, run_dir, _ = tracked
    expected = jsonl_series(run_dir)
    assert len(expected["test/accuracy"]) == 5
    series = tensorboard_series(run_dir / "tensorboard")
    rounds = {key: value for key, value in series.items() if not key.startswith("summary/")}
    assert same_series(rounds, as_float32(expected))
    assert all(len(steps) == len(set(steps)) for steps in tensorboard_raw_steps(run_dir / "tensorboard").values())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert series["summary/final_accuracy"] == as_float32({"a": [(5, summary["final_accuracy"])]})["a"]


def test_tensorboard_has_config_hparams_and_plots(tracked):
    from tensorboard.backend.event_processing import event_accumulator

    _, run_dir, _ = tracked
    accumulator = event_accumulator.EventAccumulator(str(run_dir / "tensorboard"),
                                                     size_guidance={event_accumulator.IMAGES: 0})
    accumulator.Reload()
    assert {"plots/partition", "plots/participation"} <= set(accumulator.Tags()["images"])
    from tensorboard.plugins.hparams import plugin_data_pb2

    content = plugin_data_pb2.HParamsPluginData.FromString(
        accumulator.PluginTagToContent("hparams")["_hparams_/session_start_info"])
    hparams = content.session_start_info.hparams
    assert hparams["client.learning_rate"].number_value == 0.05
    assert hparams["data.name"].string_value == "synthetic"
    texts = accumulator.Tensors("config/text_summary")
    assert b"learning_rate = 0.05" in texts[0].tensor_proto.string_val[0]


def test_mlflow_metric_history_equals_metrics_jsonl(tracked):
    root, run_dir, state = tracked
    expected = jsonl_series(run_dir)
    mlflow = state["mlflow"]
    # The default store: a local SQLite database beside the run directory (MLflow's default since 3.7).
    assert mlflow["tracking_uri"] == "sqlite:///" + str((root / "out" / "mlflow.db").resolve())
    assert same_series(mlflow_series(mlflow["tracking_uri"], mlflow["run_id"], expected), expected)

    from mlflow.tracking import MlflowClient
    client = MlflowClient(tracking_uri=mlflow["tracking_uri"])
    run = client.get_run(mlflow["run_id"])
    assert run.info.status == "FINISHED"
    assert run.data.params["client.learning_rate"] == "0.05"
    assert run.data.params["run.trackers"] == "tensorboard,mlflow,wandb"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert run.data.metrics["summary/best_accuracy"] == summary["best_accuracy"]
    # A few headline values are metrics; the whole summary is the summary.json artifact.
    from fedhet.tracking.layout import HEADLINE_SUMMARY
    summary_metrics = {key for key in run.data.metrics if key.startswith("summary/")}
    assert summary_metrics <= {f"summary/{key}" for key in HEADLINE_SUMMARY} and "summary/mean_update_norm" not in summary_metrics
    assert "summary.json" in {info.path for info in client.list_artifacts(mlflow["run_id"])}
    assert run.data.tags["setting"] == "tiny" and run.data.tags["seed"] == "1" and run.info.run_name == "tiny seed=1"
    artifacts = {info.path for info in client.list_artifacts(mlflow["run_id"], "plots")}
    assert artifacts == {"plots/partition.png", "plots/participation.png"}
    # ... in the output folder (MLflow's default for a SQLite store would be ./mlruns in the working directory).
    assert run.info.artifact_uri.startswith((root / "out" / "mlartifacts").resolve().as_uri() + "/")
    assert client.get_experiment(mlflow["experiment_id"]).name == "fedhet"


def test_wandb_offline_history_equals_metrics_jsonl(tracked):
    _, run_dir, state = tracked
    series, run_ids, summary = wandb_history(run_dir / "wandb")
    assert run_ids == {state["wandb"]["run_id"]}
    assert same_series(series, jsonl_series(run_dir))
    saved = json.loads((run_dir / "summary.json").read_text())
    assert summary["summary/final_accuracy"] == saved["final_accuracy"]
    files = {path.name for path in (run_dir / "wandb").glob("offline-run-*/files/*")}
    assert {"partition.png", "participation.png", "config.toml", "summary.json"} <= files


def test_nothing_written_outside_the_output_folder(tracked):
    root, run_dir, _ = tracked
    # The home folder (W&B's and MLflow's default settings, caches and telemetry ids) stays empty,
    # and the working directory holds nothing (no ./wandb, no ./mlruns).
    assert [p for p in (root / "home").rglob("*")] == []
    assert [p for p in (root / "cwd").rglob("*")] == []
    # Everything W&B wrote is inside RUN_DIR/wandb; W&B wrote only offline runs.
    def written_by_wandb(path):
        return (path.suffix == ".wandb" or path.name.startswith(("offline-run-", "latest-run", "debug", "core-debug"))
                or path.name in ("requirements.txt", "wandb-metadata.json", "wandb-summary.json"))

    outside = [p for p in (root / "out").rglob("*") if written_by_wandb(p) and (run_dir / "wandb") not in p.parents]
    assert outside == []
    runs = list((run_dir / "wandb").glob("*run-*"))
    assert runs and all(p.name.startswith("offline-run-") for p in runs)
    # MLflow: the database, its lock and the artifacts of its runs, beside the run directory.
    assert sorted(p.name for p in (root / "out").iterdir()) == [".mlflow.db.fedhet-lock", "mlartifacts",
                                                                 "mlflow.db", "tiny"]
    assert not math.isnan(json.loads((run_dir / "summary.json").read_text())["final_accuracy"])


@pytest.mark.slow
def test_tensorboard_server_serves_the_scalars(tracked):
    """TensorBoard itself (its data server, as the dashboards read it) lists and returns the scalars."""
    import signal
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    root, run_dir, _ = tracked
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(run_dir.parent),
                               "--host", "127.0.0.1", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=isolated_env(root / "tb"))
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    url = f"http://127.0.0.1:{port}/data/plugin/scalars/scalars?run=tiny/tensorboard&tag=test/accuracy"
    try:
        deadline, points = time.monotonic() + 90, None
        while time.monotonic() < deadline and points is None:
            try:
                points = json.loads(opener.open(url, timeout=5).read())
            except OSError:
                time.sleep(0.5)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    assert points is not None, "TensorBoard did not answer on 127.0.0.1"
    served = {"test/accuracy": [(step, value) for _wall, step, value in points]}
    assert same_series(served, as_float32({"test/accuracy": jsonl_series(run_dir)["test/accuracy"]}))


def test_tracking_does_not_change_the_numbers(tracked, tmp_path):
    from fedhet import load_config, run_experiment
    from small_run import SMALL

    _, run_dir, _ = tracked
    plain = load_config(None, [*SMALL, f"run.out_dir={tmp_path}", "run.name=tiny", "run.rounds=5"])
    run_experiment(plain)
    tracked_series, plain_series = jsonl_series(run_dir), jsonl_series(tmp_path / "tiny")
    tracked_series.pop("diag/wall_seconds"), plain_series.pop("diag/wall_seconds")
    assert same_series(tracked_series, plain_series)
