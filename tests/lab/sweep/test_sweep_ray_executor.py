"""Sweeps with the Ray executor on a local Ray (one per module, its own temporary directory): the same
results as a local sweep whether run directories are shipped back or written in place, interrupted runs
resumed, a run whose worker is killed retried from its last shipped checkpoint."""
from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import tempfile

import pytest
import torch

from fedhet.engine.callbacks import read_metrics
from fedhet.engine.checkpoint import load_checkpoint
from fedhet.lab.sweep.execute import run_sweep
from fedhet.lab.sweep.grid import SweepError, parse_grid
from fedhet.lab.sweep.options import SweepOptions
from fedhet.lab.sweep.plan import plan_sweep
from fedhet.lab.sweep.progress import DONE, FAILED, SKIPPED
from small_run import StopAfter

ray = pytest.importorskip("ray")

GRID = [parse_grid("server.learning_rate=0.5,1")]


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    temp_dir = tempfile.mkdtemp(prefix="fedhet-test-ray-")
    # address="local": never another helper's cluster; two CPUs so that two runs go at once.
    ray.init(address="local", num_cpus=2, _temp_dir=temp_dir, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    try:
        yield
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


def _sweep(plan, **options):
    stream = io.StringIO()
    result = run_sweep(plan, stream=stream, live=False, options=SweepOptions(executor="ray", **options))
    return result, stream.getvalue()


def _records(run_dir):
    return [{k: v for k, v in record.items() if k != "wall_seconds"} for record in read_metrics(run_dir / "metrics.jsonl")]


def _params(run_dir):
    return load_checkpoint(run_dir)["simulator"]["params"]


def _assert_same_run(a, b):
    """Two run directories of the same configuration hold the same numbers (bit for bit)."""
    assert _records(a) == _records(b)
    assert torch.equal(_params(a), _params(b))
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (a, b))
    assert sa["final_accuracy"] == sb["final_accuracy"] and sa["rounds"] == sb["rounds"] == 6


@pytest.fixture(scope="module")
def local_results(tmp_path_factory):
    """The reference: the same sweep run by the local executor in this process."""
    from small_run import small_toml

    root = tmp_path_factory.mktemp("reference")
    base = root / "tiny.toml"
    base.write_text(small_toml(name="tiny", rounds=6, eval_every=2, checkpoint_every=2))
    plan = plan_sweep(base, grids=GRID, out_dir=root / "out")
    result = run_sweep(plan, jobs=1, stream=io.StringIO(), live=False)
    assert [o.status for o in result.outcomes] == [DONE, DONE]
    return {o.run.name: o.run.run_dir for o in result.outcomes}


@pytest.mark.parametrize("transfer", ["files", "auto"])
def test_ray_sweep_equals_local_sweep(tiny_config, tmp_path, local_results, transfer):
    plan = plan_sweep(tiny_config, grids=GRID, out_dir=tmp_path / "out")
    result, text = _sweep(plan, ray_transfer=transfer)
    assert [o.status for o in result.outcomes] == [DONE, DONE], [o.error for o in result.outcomes]
    # auto on one machine: the probe file is visible, the runs write in place.
    assert f"({'files' if transfer == 'files' else 'shared'})" in text
    for outcome in result.outcomes:
        _assert_same_run(outcome.run.run_dir, local_results[outcome.run.name])
        assert outcome.summary["final_accuracy"] == json.loads(
            (local_results[outcome.run.name] / "summary.json").read_text())["final_accuracy"]
        log = (outcome.run.run_dir / "sweep.log").read_text()
        assert "ray: starting on" in log and "backend: sequential" in log
    assert not (tmp_path / "out" / ".fedhet-ray-probe").exists()
    # Resumable as any sweep: the second invocation skips both (and never submits a task).
    again, _ = _sweep(plan_sweep(tiny_config, grids=GRID, out_dir=tmp_path / "out"), ray_transfer=transfer)
    assert [o.status for o in again.outcomes] == [SKIPPED, SKIPPED]


def test_interrupted_run_resumes_on_ray_with_shipped_files(tiny_config, tmp_path, local_results):
    from fedhet.engine.runner import run_experiment

    plan = plan_sweep(tiny_config, grids=GRID, out_dir=tmp_path / "out")
    first = plan.runs[0]
    with pytest.raises(KeyboardInterrupt):
        run_experiment(first.config, first.run_dir, callbacks=[StopAfter(3)])     # checkpoint after round 2
    result, text = _sweep(plan, ray_transfer="files")
    assert [o.status for o in result.outcomes] == [DONE, DONE]
    assert "resumed on" in text and "resuming" in (first.run_dir / "sweep.log").read_text()
    for outcome in result.outcomes:
        _assert_same_run(outcome.run.run_dir, local_results[outcome.run.name])


def test_run_whose_worker_dies_is_retried_from_its_last_shipped_checkpoint(tiny_config, tmp_path, local_results,
                                                                          monkeypatch):
    from fedhet.lab.sweep import ray_executor

    handle = ray_executor.RaySweepExecutor._handle
    pids, killed = {}, []

    def kill_after_round_two(self, attempt, message):
        if message["kind"] == "started":
            pids[attempt.run.name] = message["pid"]
        outcome = handle(self, attempt, message)
        # The round-2 checkpoint has just been written into the run directory: kill the worker.
        if message["kind"] == "files" and message.get("round") == 2 and attempt.number == 1 and not killed:
            killed.append(attempt.run.name)
            os.kill(pids[attempt.run.name], signal.SIGKILL)
        return outcome

    monkeypatch.setattr(ray_executor.RaySweepExecutor, "_handle", kill_after_round_two)
    plan = plan_sweep(tiny_config, grids=GRID, out_dir=tmp_path / "out")
    result, text = _sweep(plan, ray_transfer="files")
    assert [o.status for o in result.outcomes] == [DONE, DONE], [o.error for o in result.outcomes]
    [victim] = killed
    log = (tmp_path / "out" / victim / "sweep.log").read_text()
    assert "attempt 1 lost (WorkerCrashedError" in log and "attempt 2 resumes from the last checkpoint" in log
    # The task runs ahead of the messages it sent, so the kill lands at round 2 or later; the retry
    # resumes from a shipped checkpoint (round 2 or 4), never from the start, or, when a loaded machine
    # let the task finish before the kill landed, finds the shipped run complete and trains nothing.
    assert re.search(r"resuming .* after round [24]\n|finished all 6 rounds before; nothing ran", log), log
    for outcome in result.outcomes:
        _assert_same_run(outcome.run.run_dir, local_results[outcome.run.name])


def test_run_lost_more_often_than_allowed_fails_and_the_sweep_goes_on(tiny_config, tmp_path, monkeypatch):
    from fedhet.lab.sweep import ray_executor

    handle = ray_executor.RaySweepExecutor._handle

    def kill_on_start(self, attempt, message):
        if message["kind"] == "started" and "0.5" in attempt.run.name:
            os.kill(message["pid"], signal.SIGKILL)
        return handle(self, attempt, message)

    monkeypatch.setattr(ray_executor.RaySweepExecutor, "_handle", kill_on_start)
    plan = plan_sweep(tiny_config, grids=GRID, out_dir=tmp_path / "out")
    result, _ = _sweep(plan, ray_transfer="files", ray_max_attempts=2)
    failed, done = result.outcomes
    assert (failed.status, done.status) == (FAILED, DONE)
    assert failed.error.startswith("lost 2 time(s) to the cluster, last: WorkerCrashedError")
    manifest = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert [r["status"] for r in manifest["runs"]] == [FAILED, DONE]


def test_a_run_that_raises_is_a_failed_run_not_retried(tiny_config, tmp_path):
    plan = plan_sweep(tiny_config, sets=["server.learning_rate=1e30"], out_dir=tmp_path / "out")
    result, _ = _sweep(plan, ray_transfer="files")
    [outcome] = result.outcomes
    assert outcome.status == FAILED and "TrainingDivergedError" in outcome.error
    log = (outcome.run.run_dir / "sweep.log").read_text()
    assert "attempt" not in log and "diverged" in log.lower()


def test_bundle_larger_than_any_node_is_refused(tiny_config, tmp_path):
    plan = plan_sweep(tiny_config, out_dir=tmp_path / "out")
    with pytest.raises(SweepError, match=r"--ray-cpus-per-run 64 .* no node of the cluster has that much"):
        _sweep(plan, ray_cpus_per_run=64)
