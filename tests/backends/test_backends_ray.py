"""The Ray backend gives bitwise the sequential backend's numbers (float32 and float64, every
registered local solver, Hybrid+ cohorts, FedBuff and FedAsync runs on the virtual clock), survives
an actor killed mid-round, stops cleanly when its workers are gone, resumes across backends, and
refuses an address with no cluster.

One private local Ray (``address="local"``, its own temporary directory) serves the whole module;
the backends under test find it initialised and use it."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pytest
import torch

pytest.importorskip("ray")

import ray  # noqa: E402

import fedhet.backends.ray_backend as ray_backend  # noqa: E402
from async_cases import MODES, assert_meaningful, assert_same_async_run, async_run  # noqa: E402
from backend_cases import SOLVERS, assert_same_round, make_solver, make_task, make_work  # noqa: E402
from fedhet.algorithms import build as build_algorithm  # noqa: E402
from fedhet.backends.ray_backend import (  # noqa: E402
    RayBackend,
    RayClusterUnreachableError,
    RaySettings,
    RayWorkersLostError,
    check_reachable,
)
from fedhet.backends.sequential import SequentialBackend  # noqa: E402
from fedhet.config.schema import load_config  # noqa: E402
from fedhet.core.options import ConfigError  # noqa: E402
from fedhet.core.task import evaluate  # noqa: E402
from fedhet.engine import checkpoint as ckpt  # noqa: E402
from fedhet.engine.backend_choice import BACKENDS, BackendOptions, select_backend  # noqa: E402
from fedhet.engine.callbacks import Callback, read_metrics  # noqa: E402
from fedhet.engine.runner import resume_run, run_experiment  # noqa: E402
from fedhet.errors import FedhetError  # noqa: E402
from small_run import SMALL, StopAfter, small_toml  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
COHORT = [0, 1, 3, 4, 6, 8, 9]


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray for the module, stopped (and its directory removed) whatever the tests did."""
    temp_dir = tempfile.mkdtemp(prefix="fedhet-ray-test-")
    warnings.filterwarnings("ignore", category=FutureWarning, module="ray")   # Ray's accelerator notice
    # 8 logical CPUs on any machine: the module pool and a run's own backend hold 2 actors each.
    ray.init(address="local", num_cpus=8, include_dashboard=False, _temp_dir=temp_dir,
             log_to_driver=False, logging_level="WARNING")
    try:
        yield
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def pool(local_ray):
    backend = RayBackend(RaySettings(actors=2))
    try:
        yield backend
    finally:
        backend.close()


_TASKS = {}


def task_for(dtype, system):
    """One task per (dtype, system): the pool keeps its actors and loads a task once."""
    if (dtype, system) not in _TASKS:
        _TASKS[dtype, system] = make_task("model.name=mlp", "model.hidden=[12]", "client.batch_size=16",
                                          f"client.system={system}", dtype=dtype)
    return _TASKS[dtype, system]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("system", ["fixed", "hybrid_plus"])
@pytest.mark.parametrize("solver_name", SOLVERS)
def test_ray_bitwise_equal_to_sequential(solver_name, system, dtype, pool):
    task, config = task_for(dtype, system)
    solver = make_solver(solver_name, config)
    for round_index in (0, 1, 2):                    # the actors persist across rounds
        work = make_work(task, solver, COHORT, round_index=round_index)
        reference = SequentialBackend().train_cohort(task, solver, work)
        assert_same_round(reference, pool.train_cohort(task, solver, work), exact=True)
    if system == "hybrid_plus":      # the case is meaningful: the clients' local steps differ
        assert len(set(reference[0].local_steps.tolist())) > 1


@pytest.mark.parametrize("mode", sorted(MODES))
def test_async_runs_bitwise_equal_to_sequential(mode, pool, tmp_path):
    """FedBuff (with SCAFFOLD) and FedAsync on the virtual clock (docs/async.md): the loop runs in the
    driver and the actors train each cohort with the sequential code, so the events and every number
    are bitwise the sequential backend's (the evaluation split across the actors too)."""
    reference = async_run(tmp_path, SequentialBackend(), mode)
    assert_meaningful(reference)
    assert_same_async_run(reference, async_run(tmp_path, pool, mode), exact=True)


def test_split_evaluation_is_bitwise_the_engine_evaluation(pool):
    task, config = task_for("float32", "fixed")
    solver = make_solver("sgd", config)
    pool.train_cohort(task, solver, make_work(task, solver, COHORT))
    x = make_work(task, solver, COHORT).params + 0.05
    for batch_size in (7, 50, 10_000):
        assert evaluate(task, x, batch_size=batch_size, backend=pool) == evaluate(task, x, batch_size=batch_size)


def test_an_actor_killed_mid_round_loses_no_client(pool):
    task, config = task_for("float64", "hybrid_plus")
    solver = make_solver("scaffold", config)
    work = make_work(task, solver, list(range(10)), round_index=5)
    reference = SequentialBackend().train_cohort(task, solver, work)
    pool.train_cohort(task, solver, work)            # actors serving this task
    victim = pool.actor_pids()[0]
    replaced = pool._pool.replaced
    killed = []

    def kill_once(position):
        if not killed:               # after the first client's result, while the others are in flight
            os.kill(victim, signal.SIGKILL)
            killed.append(position)

    pool.on_client_done = kill_once
    try:
        result = pool.train_cohort(task, solver, work)
    finally:
        pool.on_client_done = None
    assert killed
    assert_same_round(reference, result, exact=True)
    assert pool._pool.replaced == replaced + 1
    pids = pool.actor_pids()
    assert victim not in pids and len(pids) == 2
    # and the next round runs on the replacement as usual
    assert_same_round(reference, pool.train_cohort(task, solver, work), exact=True)


def test_select_builds_the_ray_backend_only_on_request(local_ray):
    assert "ray" in BACKENDS
    task, config = make_task("model.name=logreg", "run.backend=ray", "run.ray_actors=2", "run.ray_cpus_per_actor=1")
    solver, options = build_algorithm(config).solver, BackendOptions.from_config(config)
    backend, reason = select_backend("ray", task, solver, options)
    assert isinstance(backend, RayBackend) and backend.settings.actors == 2 and "2 actors" in reason
    backend.close()
    assert select_backend("auto", task, solver, options)[0].name != "ray"


def test_ray_address_must_look_like_an_address():
    with pytest.raises(ConfigError, match="run.ray_address"):
        load_config(None, [*SMALL, "run.ray_address=not an address"])
    load_config(None, [*SMALL, "run.ray_address=127.0.0.1:6379"])
    load_config(None, [*SMALL, "run.ray_address=auto"])


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_address_with_no_cluster_is_refused_quickly():
    started = time.monotonic()
    with pytest.raises(RayClusterUnreachableError, match="no Ray cluster answers there"):
        check_reachable(f"127.0.0.1:{_free_port()}")
    assert time.monotonic() - started < 30


@pytest.mark.slow      # a fresh interpreter importing torch: ~7 s
def test_the_command_line_says_one_line_for_an_address_with_no_cluster(tmp_path):
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src"), OMP_NUM_THREADS="1")
    config = tmp_path / "small.toml"
    config.write_text(small_toml(out_dir=str(tmp_path), backend="ray", ray_address=f"127.0.0.1:{port}",
                                 progress=False))
    proc = subprocess.run([sys.executable, "-m", "fedhet.cli", "run", str(config)], capture_output=True, text=True,
                          env=env, timeout=180)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith(f"fedhet: run.ray_address = '127.0.0.1:{port}': no Ray cluster answers there"), \
        proc.stderr
    assert "Traceback" not in proc.stderr


# --- whole runs: checkpoints, resume, workers lost ------------------------------------------------

def _config(tmp_path, *extra):
    return load_config(None, [*SMALL, f"run.out_dir={tmp_path}", "run.checkpoint_every=1", *extra])


def _records(run_dir):
    return [{k: v for k, v in r.items() if k != "wall_seconds"} for r in read_metrics(Path(run_dir) / "metrics.jsonl")]


def _params(run_dir):
    return ckpt.load_checkpoint(Path(run_dir))["simulator"]["params"]


def _assert_same_run(a, b):
    assert _records(a) == _records(b)
    assert torch.equal(_params(a), _params(b))


RAY = ["run.backend=ray", "run.ray_actors=2"]


@pytest.mark.slow      # three runs and their actors: ~30 s
def test_resume_across_backends_is_bitwise_an_uninterrupted_sequential_run(local_ray, tmp_path):
    run_experiment(_config(tmp_path, "run.name=reference", "run.backend=sequential"))
    # interrupted on ray, resumed on ray
    with pytest.raises(KeyboardInterrupt):
        run_experiment(_config(tmp_path, "run.name=ray", *RAY), callbacks=[StopAfter(3)])
    resume_run(tmp_path / "ray")
    _assert_same_run(tmp_path / "reference", tmp_path / "ray")
    # interrupted on sequential, resumed on ray (the backend may change on resume)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(_config(tmp_path, "run.name=moved", "run.backend=sequential"), callbacks=[StopAfter(2)])
    summary = resume_run(tmp_path / "moved", sets=["run.backend=ray", "run.ray_actors=2"])
    assert summary["backend"] == "ray"
    _assert_same_run(tmp_path / "reference", tmp_path / "moved")


class KillWorkersAfter(Callback):
    """Kills every actor of the run's backend by its pid at the end of round ``k``."""

    def __init__(self, k):
        self.k = k

    def on_round_end(self, run, record):
        if record["round"] == self.k:
            for pid in run.backend.actor_pids():
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow      # two runs and their actors: ~25 s
def test_losing_every_worker_stops_the_run_and_keeps_the_last_checkpoint(local_ray, tmp_path):
    run_experiment(_config(tmp_path, "run.name=reference", "run.backend=sequential"))
    config = _config(tmp_path, "run.name=lost", *RAY, "run.ray_retries=0")
    with pytest.raises(RayWorkersLostError, match=r"(?s)run\.ray_retries = 0.*last checkpoint .* is intact"):
        run_experiment(config, callbacks=[KillWorkersAfter(2)])
    saved = ckpt.load_checkpoint(tmp_path / "lost")
    assert saved["simulator"]["next_round"] == 2
    # the checkpoint is good: resumed (with retries allowed), the run ends as if nothing happened
    resume_run(tmp_path / "lost", sets=["run.ray_retries=3"])
    _assert_same_run(tmp_path / "reference", tmp_path / "lost")


@pytest.mark.slow      # its own actors, and two replacements that cannot start: ~15 s
def test_no_actor_left_and_none_startable_stops_the_round(local_ray, monkeypatch):
    task, config = task_for("float64", "fixed")
    solver = make_solver("sgd", config)
    backend = RayBackend(RaySettings(actors=2))
    try:
        work = make_work(task, solver, list(range(10)))
        backend.train_cohort(task, solver, work)
        # run.ray_start_timeout bounds the wait for a replacement (the first start may take longer here).
        backend._pool.settings = RaySettings(actors=2, start_timeout=3.0)
        # No node has 1000 CPUs: a replacement can never be scheduled.
        backend._pool.remote_class = ray.remote(num_cpus=1000, max_restarts=0)(ray_backend.ClientActor)
        for pid in backend.actor_pids():
            os.kill(pid, signal.SIGKILL)
        with pytest.raises(RayWorkersLostError, match="no actor is left"):
            backend.train_cohort(task, solver, work)
    finally:
        backend.close()


def test_without_ray_installed_the_backend_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)          # makes `import ray` fail
    with pytest.raises(FedhetError, match=r"pip install 'fedhet\[ray\]'"):
        RayBackend(RaySettings())


def test_ray_cut_short_clients_bitwise_equal_to_sequential(pool):
    """The virtual clock's partial work (``RoundWork.step_limits``) reaches the actors."""
    import dataclasses

    task = task_for("float64", "fixed")[0]
    solver = make_solver("scaffold", task_for("float64", "fixed")[1])
    work = dataclasses.replace(make_work(task, solver, COHORT), step_limits={0: 1, 4: 2})
    reference = SequentialBackend().train_cohort(task, solver, work)
    result = pool.train_cohort(task, solver, work)
    assert_same_round(reference, result, exact=True)
    steps = dict(zip(result[0].client_ids.tolist(), result[0].local_steps.tolist()))
    assert steps[0] == 1 and steps[4] == 2


@pytest.mark.slow      # its own two actors and a replacement: ~10 s
def test_a_stopped_actor_is_dropped_after_the_call_timeout_and_the_round_is_unchanged(local_ray):
    """SIGSTOP leaves an actor alive to Ray: without run.ray_call_timeout the round waited forever."""
    task, config = task_for("float64", "fixed")
    solver = make_solver("sgd", config)
    work = make_work(task, solver, list(range(10)), round_index=2)
    reference = SequentialBackend().train_cohort(task, solver, work)
    backend = RayBackend(RaySettings(actors=2, call_timeout=3.0))
    stopped = []
    try:
        backend.train_cohort(task, solver, work)          # actors serving this task
        victim = backend.actor_pids()[0]

        def stop_once(position):
            if not stopped:
                os.kill(victim, signal.SIGSTOP)
                stopped.append(victim)

        backend.on_client_done = stop_once
        started = time.monotonic()
        result = backend.train_cohort(task, solver, work)
        assert time.monotonic() - started < 60
        assert stopped
        assert_same_round(reference, result, exact=True)
        assert backend._pool.replaced == 1 and victim not in backend.actor_pids()
    finally:
        backend.on_client_done = None
        for pid in stopped:               # our own actor process, by PID: never leave it stopped
            try:
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        backend.close()


@pytest.mark.parametrize("failure", [BrokenPipeError(32, "Broken pipe"), "system"])
def test_losing_ray_itself_is_a_workers_lost_line(pool, monkeypatch, failure):
    """A killed raylet or head node surfaced as `fedhet: Broken pipe` or Ray's own dump (M2, M3)."""
    task, config = task_for("float64", "fixed")
    solver = make_solver("sgd", config)
    work = make_work(task, solver, COHORT)
    pool.train_cohort(task, solver, work)             # the pool serves this task

    def lost(*args, **kwargs):
        raise failure if isinstance(failure, Exception) else ray.exceptions.RaySystemError("raylet died")

    monkeypatch.setattr(ray, "wait", lost)
    with pytest.raises(RayWorkersLostError, match=r"connection to Ray was lost in round \d+ \((BrokenPipeError|RaySystemError)"):
        pool.train_cohort(task, solver, work)
    monkeypatch.undo()
    pool.train_cohort(task, solver, work)              # the calls left in flight do not disturb the next round
