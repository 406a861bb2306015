"""run.backend: what auto picks and why, explicit choices, and auto == sequential end to end."""
import pytest
import torch

import fedhet.engine.backend_choice as select
from fedhet.algorithms import build as build_algorithm
from fedhet.config.schema import load_config
from fedhet.core.options import ConfigError
from fedhet.engine.backend_choice import BackendOptions
from fedhet.engine.callbacks import read_metrics
from fedhet.engine.checkpoint import load_checkpoint
from fedhet.engine.device import configure_threads, resolve_device
from fedhet.engine.federation import build_federation
from fedhet.engine.runner import run_experiment

# Synthetic(1,1): 10 devices of unequal sizes, 60 features, 10 classes (tests/backends/backend_cases.py's).
TASK = ["data.name=synthetic", "data.num_devices=10", "data.max_device_size=90", "partition.name=natural",
        "partition.num_clients=10", "participation.clients_per_round=5", "client.learning_rate=0.05",
        "run.progress=false", "run.dtype=float64"]

# d x B = 83,978 x 16 > PROCESS_MIN_STEP_WORK: big enough for worker processes
BIG = ("model.name=mlp", "model.hidden=[256,256]", "client.batch_size=16")
TINY = ("model.name=logreg", "client.batch_size=16")


def make_task(*overrides: str):
    """``(task, config)`` of the small federation on the CPU."""
    config = load_config(None, [*TASK, *overrides])
    return build_federation(config, torch.device("cpu")).task, config


def choose(name, task, config):
    """``select_backend`` as the runner calls it: with the run's built solver and its options."""
    return select.select_backend(name, task, build_algorithm(config).solver, BackendOptions.from_config(config))


@pytest.fixture
def cores(monkeypatch):
    def set_cores(count):
        monkeypatch.setattr(select, "usable_cpus", lambda threads=None: min(count, threads or count))
    return set_cores


def test_auto_on_a_multicore_cpu_picks_processes(cores):
    cores(4)
    task, config = make_task(*BIG)
    backend, reason = choose("auto", task, config)
    try:
        assert backend.name == "processes" and backend.workers == 4 and "4 usable cores" in reason
    finally:
        backend.close()


def test_auto_respects_run_threads(cores):
    cores(4)
    task, config = make_task(*BIG, "run.threads=1")
    backend, reason = choose("auto", task, config)
    assert backend.name == "sequential" and "run.threads = 1" in reason
    task, config = make_task(*BIG, "run.threads=3")
    backend, _ = choose("auto", task, config)
    assert backend.name == "processes" and backend.workers == 3
    backend.close()


def test_auto_with_one_core_or_a_tiny_model_is_sequential(cores):
    cores(1)
    task, config = make_task(*BIG)
    assert choose("auto", task, config)[0].name == "sequential"
    cores(8)
    task, config = make_task(*TINY)
    backend, reason = choose("auto", task, config)
    assert backend.name == "sequential" and "tiny" in reason


def test_explicit_backends_and_unknown_names(cores):
    cores(2)
    task, config = make_task(*TINY)
    for name in ("sequential", "vectorized", "processes"):
        backend, reason = choose(name, task, config)
        assert backend.name == name and reason.startswith("requested")
        getattr(backend, "close", lambda: None)()
    with pytest.raises(ValueError, match="allowed: auto, sequential, vectorized, processes, ray"):
        choose("threads", task, config)
    with pytest.raises(ConfigError):
        load_config(None, ["run.backend=threads"])


def test_auto_on_an_accelerator_picks_vectorized_unless_it_cannot(monkeypatch):
    task, config = make_task(*TINY)
    task.device = torch.device("meta")     # stands in for a GPU: the rule reads only the device type
    monkeypatch.setattr(select, "unsupported_reason", lambda task, solver: None)
    backend, reason = choose("auto", task, config)
    assert backend.name == "vectorized" and reason == "auto: meta device"
    backend, reason = choose("processes", task, config)
    assert backend.name == "vectorized" and "the task is on meta" in reason
    monkeypatch.setattr(select, "unsupported_reason", lambda task, solver: "the model has dropout")
    backend, reason = choose("auto", task, config)
    assert backend.name == "sequential" and reason == "auto: meta device, but the model has dropout: sequential instead"


def test_device_auto_uses_a_gpu_when_present(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto").type == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto").type == "cpu"
    with pytest.raises(ValueError, match="no CUDA GPU"):
        resolve_device("cuda")


def test_threads_never_exceed_the_usable_cpus():
    before = torch.get_num_threads()
    try:
        assert configure_threads(None, torch.device("cpu")) == 1
        assert configure_threads(10_000, torch.device("cpu")) == select.usable_cpus()
    finally:
        torch.set_num_threads(before)


def _values(records):
    return [{k: v for k, v in r.items() if k != "wall_seconds"} for r in records]


def test_auto_and_sequential_runs_give_the_same_metrics(tmp_path):
    common = ["data.name=synthetic", "data.num_devices=10", "data.max_device_size=90",
              "partition.name=natural", "partition.num_clients=10", "participation.clients_per_round=4",
              "client.learning_rate=0.05", "client.epochs=1", "client.system=hybrid_plus", *BIG,
              "run.rounds=3", "run.progress=false", f"run.out_dir={tmp_path}"]
    notes = {}
    for backend in ("auto", "sequential"):
        log = []
        run_experiment(load_config(None, [*common, f"run.backend={backend}", f"run.name={backend}"]), log=log.append)
        notes[backend] = [line for line in log if line.startswith("backend:")]
    if select.usable_cpus() >= 2 and select.fork_available():
        cpus = select.usable_cpus()
        assert notes["auto"] == [f"backend: processes (auto: CPU with {cpus} usable cores: {cpus} processes "
                                 f"(this one and {cpus - 1} forked worker{'s' if cpus != 2 else ''}), one thread each)"]
    auto, sequential = (read_metrics(tmp_path / name / "metrics.jsonl") for name in ("auto", "sequential"))
    assert len(auto) == 3 and _values(auto) == _values(sequential)
    final = [load_checkpoint(tmp_path / name)["simulator"]["params"]
             for name in ("auto", "sequential")]
    assert torch.equal(*final)


@pytest.mark.parametrize("algorithm", ["scaffold", "fedspeed"])
def test_vectorized_run_matches_sequential_run_with_client_states(tmp_path, algorithm):
    """Per-client stores read and written across rounds: the vectorised backend's whole run gives
    the sequential run's metrics (float64, to rounding)."""
    common = ["data.name=synthetic", "data.num_devices=10", "data.max_device_size=90", "partition.name=natural",
              "partition.num_clients=10", "participation.clients_per_round=4", f"algorithm={algorithm}",
              "client.learning_rate=0.05", "client.system=hybrid_plus", "model.name=mlp", "model.hidden=[16]",
              "run.dtype=float64", "run.rounds=4", "run.progress=false", f"run.out_dir={tmp_path}"]
    for backend in ("vectorized", "sequential"):
        run_experiment(load_config(None, [*common, f"run.backend={backend}", f"run.name={backend}"]))
    vectorized, sequential = (read_metrics(tmp_path / name / "metrics.jsonl") for name in ("vectorized", "sequential"))
    assert len(vectorized) == 4
    for a, b in zip(sequential, vectorized):
        for key, value in a.items():
            if key != "wall_seconds" and isinstance(value, float):
                assert b[key] == pytest.approx(value, rel=1e-8, abs=1e-10), key
            elif key != "wall_seconds":
                assert b[key] == value, key
