"""Kill a tracked run after round 3, resume it: each tracker continues the same tracked run and no
step appears twice.

SMALL checkpoints every 2 rounds, so the kill (SIGKILL, from a callback after round 3's callbacks:
metrics.jsonl has round 3, the checkpoint holds round 2) forces the resume to compute round 3 again;
a tracker that had logged round 3 before the kill would now hold it twice.
"""
import json
import signal

import pytest

from tracking_readers import (
    as_float32,
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

KILLED = """
import os, signal
from small_run import SMALL
from fedhet import load_config, run_experiment
from fedhet.engine.callbacks import Callback

class KillAfter(Callback):
    def on_round_end(self, run, record):
        if record["round"] == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        return False

config = load_config(None, [*SMALL, "run.out_dir=../out", "run.name=killed",
                            'run.trackers=["tensorboard", "mlflow", "wandb"]'])
run_experiment(config, callbacks=[KillAfter()])
"""
RESUME = """
from fedhet import resume_run
resume_run("../out/killed")
"""


def test_kill_after_round_3_then_resume_logs_every_step_once(tmp_path):
    killed = run_python(KILLED, tmp_path, check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    run_dir = tmp_path / "out" / "killed"
    before = json.loads((run_dir / "tracking.json").read_text())
    # Round 3 was computed and written to metrics.jsonl, but no checkpoint covers it: not tracked yet.
    assert [json.loads(line)["round"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]
    assert {name: state["last_round"] for name, state in before.items()} == {
        "tensorboard": 2, "mlflow": 2, "wandb": 2}

    run_python(RESUME, tmp_path)
    after = json.loads((run_dir / "tracking.json").read_text())
    expected = jsonl_series(run_dir)
    assert [step for step, _ in expected["test/accuracy"]] == [1, 2, 3, 4, 5, 6]

    # TensorBoard: one log directory; the raw event files hold each step once.
    raw = tensorboard_raw_steps(run_dir / "tensorboard")
    assert raw["test/accuracy"] == [1, 2, 3, 4, 5, 6]
    assert all(len(steps) == len(set(steps)) for steps in raw.values())
    tb = {key: value for key, value in tensorboard_series(run_dir / "tensorboard", purge=False).items()
          if not key.startswith("summary/")}
    assert same_series(tb, as_float32(expected))

    # MLflow: the same run, reopened and finished; its history is metrics.jsonl, each step once.
    assert after["mlflow"]["run_id"] == before["mlflow"]["run_id"]
    assert same_series(mlflow_series(after["mlflow"]["tracking_uri"], after["mlflow"]["run_id"], expected), expected)
    from mlflow.tracking import MlflowClient
    client = MlflowClient(tracking_uri=after["mlflow"]["tracking_uri"])
    assert [run.info.run_id for run in client.search_runs([after["mlflow"]["experiment_id"]])] == [
        before["mlflow"]["run_id"]]

    # W&B: two offline segments of one run id (wandb sync joins them), steps 1-2 and 3-6.
    series, run_ids, _ = wandb_history(run_dir / "wandb")
    assert run_ids == {before["wandb"]["run_id"]} and after["wandb"]["run_id"] == before["wandb"]["run_id"]
    assert len(list((run_dir / "wandb").glob("offline-run-*"))) == 2
    assert same_series(series, expected)


def test_resuming_a_finished_run_logs_nothing_again(tmp_path):
    from fedhet import load_config, resume_run, run_experiment
    from small_run import SMALL

    config = load_config(None, [*SMALL, f"run.out_dir={tmp_path}", "run.name=done", "run.rounds=2",
                                'run.trackers=["mlflow"]'])
    run_experiment(config)
    run_dir = tmp_path / "done"
    state = json.loads((run_dir / "tracking.json").read_text())["mlflow"]
    keys = ["test/accuracy", "summary/final_accuracy"]
    before = mlflow_series(state["tracking_uri"], state["run_id"], keys)
    resume_run(run_dir)
    after = mlflow_series(state["tracking_uri"], state["run_id"], keys)
    assert before == after and [step for step, _ in after["test/accuracy"]] == [1, 2]
    assert len(after["summary/final_accuracy"]) == 1


def test_a_new_run_over_an_old_directory_starts_new_tracked_runs(tmp_path):
    from fedhet import load_config, run_experiment
    from small_run import SMALL

    config = load_config(None, [*SMALL, f"run.out_dir={tmp_path}", "run.name=again", "run.rounds=2",
                                'run.trackers=["mlflow", "tensorboard"]'])
    run_experiment(config)
    run_dir = tmp_path / "again"
    first = json.loads((run_dir / "tracking.json").read_text())["mlflow"]["run_id"]
    run_experiment(config, overwrite=True)
    second = json.loads((run_dir / "tracking.json").read_text())["mlflow"]
    assert second["run_id"] != first
    assert [step for step, _ in mlflow_series(second["tracking_uri"], second["run_id"],
                                              ["test/accuracy"])["test/accuracy"]] == [1, 2]
    # The old run's TensorBoard events went with it: each step once.
    assert tensorboard_raw_steps(run_dir / "tensorboard")["test/accuracy"] == [1, 2]
