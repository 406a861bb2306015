"""Issue 22: a sweep worker that runs several runs in one process (fedhet.lab.sweep.worker --serve,
fedhet.lab.sweep.worker_pool) gives each run exactly the metrics it has when run alone, and a run
that fails leaves the worker serving the next one."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from fedhet.config.schema import config_to_toml, load_config
from fedhet.engine.callbacks import read_metrics
from fedhet.engine.dataset_cache import DatasetCache
from fedhet.engine.runner import run_experiment
from fedhet.lab.sweep import worker
from fedhet.lab.sweep.plan import NEW, PlannedRun
from fedhet.lab.sweep.worker_pool import WorkerPool
from small_run import SMALL

FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
# A few rounds of the FedAvg MLP on Fashion-MNIST: a dataset registered seeded=False, so one loaded copy
# serves every seed in a worker (fedhet.engine.dataset_cache).
FMNIST = ["data.name=fmnist", f"data.root={FASHION_DIR}", "partition.name=dirichlet", "partition.num_clients=20",
          "model.name=mlp", "participation.name=uniform", "participation.clients_per_round=3",
          "client.learning_rate=0.05", "client.batch_size=32", "client.steps=3", "run.rounds=3",
          "run.eval_every=1", "run.checkpoint_every=2", "run.progress=false"]


def _comparable(run_dir: Path) -> list[dict]:
    """metrics.jsonl without its wall-clock fields."""
    return [{k: v for k, v in record.items() if not k.endswith("seconds")}
            for record in read_metrics(run_dir / "metrics.jsonl")]


def _alone(config, tmp_path: Path, name: str) -> list[dict]:
    run_experiment(config, tmp_path / "alone" / name)
    return _comparable(tmp_path / "alone" / name)


def _configs(base: list[str], tmp_path: Path) -> list:
    variants = [["run.seed=1"], ["run.seed=2"], ["run.seed=1", "client.learning_rate=0.1"]]
    return [load_config(None, base + extra + [f"run.name=r{i}", f"run.out_dir={tmp_path / 'pool'}"])
            for i, extra in enumerate(variants)]


def _serve_in_process(configs, tmp_path: Path, datasets: DatasetCache) -> list[dict]:
    requests = io.StringIO("".join(json.dumps({"run_dir": str(tmp_path / "served" / c.run.name), "resume": False,
                                               "config": config_to_toml(c)}) + "\n" for c in configs))
    replies = io.StringIO()
    worker.serve(requests, replies, datasets=datasets)
    return [json.loads(line) for line in replies.getvalue().splitlines()]


def test_runs_served_by_one_process_match_runs_alone(tmp_path):
    configs = _configs(list(SMALL), tmp_path)
    datasets = DatasetCache()
    replies = _serve_in_process(configs, tmp_path, datasets)
    assert [r["status"] for r in replies] == [0, 0, 0]
    for config in configs:
        assert _comparable(tmp_path / "served" / config.run.name) == _alone(config, tmp_path, config.run.name)
    # Synthetic data depends on the seed: seeds 1 and 2 are two loads, the third run reuses seed 1's.
    assert (datasets.misses, datasets.hits) == (2, 1)


@pytest.mark.slow
@pytest.mark.skipif(not FASHION_DIR.is_dir(), reason="dataset-fashion-mnist is not installed")
def test_a_seed_free_dataset_loaded_once_serves_every_seed_exactly(tmp_path):
    configs = _configs(FMNIST, tmp_path)
    datasets = DatasetCache()
    replies = _serve_in_process(configs, tmp_path, datasets)
    assert [r["status"] for r in replies] == [0, 0, 0]
    assert (datasets.misses, datasets.hits) == (1, 2)
    for config in configs:
        assert _comparable(tmp_path / "served" / config.run.name) == _alone(config, tmp_path, config.run.name)


@pytest.mark.slow
def test_worker_process_runs_several_runs_and_survives_a_failed_one(tmp_path):
    """One real serving worker process (WorkerPool with one job): a run, a run that fails at start-up
    (5 devices cannot fill 12 clients), then another run; the two good runs equal runs alone."""
    good = _configs(list(SMALL), tmp_path)[:2]
    bad = load_config(None, list(SMALL) + ["data.num_devices=5", "run.name=bad", f"run.out_dir={tmp_path / 'pool'}"])
    order = [good[0], bad, good[1]]
    runs = [PlannedRun(name=c.run.name, label=c.run.name, seed=c.run.seed, assignments=(), config=c,
                       run_dir=tmp_path / "pool" / c.run.name) for c in order]
    pool = WorkerPool(1)
    statuses = {}
    try:
        for run in runs:
            run.run_dir.mkdir(parents=True)
            pool.start(run, NEW)
            pid = pool.workers[0].process.pid
            while pool.running:
                for finished, status in pool.finished(30.0):
                    statuses[finished.name] = (status, pid)
    finally:
        pool.close()
    # The failed run's status is the command line's: 2, its input (a config the data cannot fill).
    assert {name: status for name, (status, _) in statuses.items()} == {"r0": 0, "bad": 2, "r1": 0}
    assert len({pid for _, pid in statuses.values()}) == 1          # one process ran all three
    assert "fedhet:" in (tmp_path / "pool" / "bad" / "sweep.log").read_text()
    for config in good:
        assert _comparable(tmp_path / "pool" / config.run.name) == _alone(config, tmp_path, config.run.name)


def _solver_settings(solver: str) -> list[str]:
    """``solver`` with the server it needs: the algorithm that pairs them when one does (SCAFFOLD,
    FedDyn, ...), else plain FedAvg."""
    import fedhet.components  # noqa: F401  (registers every solver and algorithm)
    from fedhet.core.registry import ALGORITHMS

    pairs = [name for name, pair in sorted(ALGORITHMS.items()) if pair.client == solver]
    return [f"algorithm={pairs[0]}"] if pairs else [f"client.name={solver}"]


def _registered_solvers() -> list[str]:
    import fedhet.components  # noqa: F401
    from fedhet.core.registry import CLIENT_SOLVERS

    return CLIENT_SOLVERS.names()


def test_every_registered_local_solver_served_after_another_run_matches_its_run_alone(tmp_path):
    # One serving process runs every solver in turn (each after the previous ones, the datasets
    # cached), and each run's metrics equal that solver's run alone: nothing a run leaves behind in
    # the process (caches, torch state, registries) changes the next one's numbers.
    solvers = _registered_solvers()
    configs = [load_config(None, list(SMALL) + _solver_settings(solver)
                           + ["run.rounds=3", "run.seed=4", f"run.name={solver}", f"run.out_dir={tmp_path / 'pool'}"])
               for solver in solvers]
    replies = _serve_in_process(configs, tmp_path, DatasetCache())
    failed = [c.run.name for c, r in zip(configs, replies) if r["status"] != 0]
    assert not failed, f"runs failed in the serving process: {failed}"
    for config in configs:
        served = _comparable(tmp_path / "served" / config.run.name)
        assert served and served == _alone(config, tmp_path, config.run.name), config.run.name
