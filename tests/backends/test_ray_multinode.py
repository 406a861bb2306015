"""A real multi-node Ray cluster on this machine: a head (no CPUs, so that all work lands on the workers)
and two worker nodes with two CPUs each, each a separate ``ray start --block`` process (tests/ray_cluster.py,
free ports, its own temporary directory, stopped by process group id afterwards).

Against it: a sweep with ``--executor ray`` whose run directories are shipped back from the nodes
equals the same sweep run locally; a run with ``run.backend = "ray"`` joining the cluster gives the
``sequential`` backend's numbers bit for bit, also when one worker node is killed (by its process
group) during a round."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch

import fedhet
from fedhet.engine.callbacks import Callback, read_metrics
from fedhet.engine.checkpoint import load_checkpoint
from fedhet.lab.sweep.execute import run_sweep
from fedhet.lab.sweep.grid import parse_grid
from fedhet.lab.sweep.plan import plan_sweep
from fedhet.lab.sweep.progress import DONE
from ray_cluster import LoopbackRayCluster
from small_run import small_toml

pytestmark = pytest.mark.slow
ray = pytest.importorskip("ray")

SOURCE_ROOT = str(Path(fedhet.__file__).resolve().parents[1])


@pytest.fixture(scope="module")
def cluster():
    # The nodes' workers import this fedhet (an uninstalled source tree included).
    # Two CPUs per worker node: the ray backend's two actors leave room for a replacement on the
    # node that survives when the other is killed.
    nodes = LoopbackRayCluster(head_cpus=0, worker_cpus=2, env={"PYTHONPATH": SOURCE_ROOT})
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
    # The sweep as the command line runs it, shipping run directories back from the nodes (what a
    # cluster without a shared filesystem needs).
    from fedhet.lab.commands.sweep import sweep_command

    stderr = io.StringIO()
    status = sweep_command(str(base), grids=["server.learning_rate=0.5,1"], out=str(tmp_path / "cluster"),
                           executor="ray", ray_address=cluster.address, ray_transfer="files", stderr=stderr)
    assert status == 0, stderr.getvalue()[-3000:]
    assert "2 ran, 0 already finished, 0 failed" in stderr.getvalue() and "(files)" in stderr.getvalue()

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


def _config(tmp_path, name, **run):
    from fedhet.config.schema import load_config

    path = tmp_path / f"{name}.toml"
    path.write_text(small_toml(name=name, rounds=4, eval_every=1, checkpoint_every=2, out_dir=str(tmp_path), **run)
                    .replace("clients_per_round = 4", "clients_per_round = 6"))
    return load_config(path)


def _sequential(tmp_path):
    from fedhet.engine.runner import run_experiment

    run_experiment(_config(tmp_path, "sequential", backend="sequential"))
    return tmp_path / "sequential"


def _assert_same(run_dir, reference):
    assert _records(run_dir) == _records(reference)
    assert torch.equal(load_checkpoint(run_dir)["simulator"]["params"], load_checkpoint(reference)["simulator"]["params"])


def test_ray_backend_on_the_cluster_equals_sequential(cluster, tmp_path):
    from fedhet.engine.runner import run_experiment

    summary = run_experiment(_config(tmp_path, "ray", backend="ray", ray_address=cluster.address, ray_actors=2))
    assert summary["backend"] == "ray" and summary["rounds"] == 4
    _assert_same(tmp_path / "ray", _sequential(tmp_path))


class _KillNodeDuringRound(Callback):
    """In round ``at``, once the first client's result is back, SIGKILLs a worker node that holds an
    actor (by the process group of its ``ray start``), while the round's other clients are in flight."""

    def __init__(self, cluster, at: int):
        self.cluster, self.at, self.killed = cluster, at, []
        self.round = 0

    def on_run_start(self, run) -> None:
        self.backend = run.backend
        self.backend.on_client_done = self._client_done
        self.lost_calls = 0
        actor_lost = self.backend._actor_lost

        def count(*args, **kwargs):
            self.lost_calls += 1
            return actor_lost(*args, **kwargs)
        self.backend._actor_lost = count

    def _client_done(self, position: int) -> None:
        if self.round + 1 != self.at or self.killed:
            return
        import os

        groups = {os.getpgid(pid) for pid in self.backend.actor_pids()}
        index = next(i for i, node in enumerate(self.cluster.nodes) if i > 0 and node.pid in groups)
        self.cluster.kill_node(index)
        self.killed.append(index)

    def on_round_end(self, run, record) -> bool:
        self.round = record["round"]
        return False


def test_worker_node_killed_during_a_round_changes_nothing(cluster, tmp_path):
    from fedhet.engine.runner import run_experiment

    killer = _KillNodeDuringRound(cluster, at=2)
    summary = run_experiment(_config(tmp_path, "killed", backend="ray", ray_address=cluster.address, ray_actors=2),
                             callbacks=[killer])
    assert killer.killed, "no node was killed during round 2"
    assert cluster.nodes[killer.killed[0]].poll() is not None
    # Calls to the dead node's actor failed (in round 2, or in round 3 before Ray noticed the node's
    # death) and their clients ran on the other node.
    assert killer.lost_calls >= 1
    assert summary["rounds"] == 4
    _assert_same(tmp_path / "killed", _sequential(tmp_path))
