"""Small federations for comparing execution backends (tiny models, unequal clients), and a
comparison of two backends' results. A uniquely named module (not conftest), so that test files
import it unambiguously."""
import dataclasses

import torch

import fedhet.components  # noqa: F401  (registers every solver, so parametrisation sees them all)
from fedhet.backends.base import RoundWork
from fedhet.config.schema import load_config
from fedhet.core.registry import CLIENT_SOLVERS
from fedhet.core.seeding import torch_generator
from fedhet.engine.runner import build_federation

# Synthetic(1,1): 10 devices of unequal sizes (power law, up to 90 examples), 60 features, 10 classes.
TASK = [
    "data.name=synthetic", "data.num_devices=10", "data.max_device_size=90",
    "partition.name=natural", "partition.num_clients=10", "participation.clients_per_round=5",
    "client.learning_rate=0.05", "run.progress=false",
]


def make_task(*overrides: str, dtype: str = "float64", device: str = "cpu"):
    """``(task, config)`` of the small federation in ``dtype`` on ``device`` (the CPU by default)."""
    config = load_config(None, [*TASK, f"run.dtype={dtype}", *overrides])
    return build_federation(config, torch.device(device)).task, config


def make_solver(name: str, config):
    """Solver ``name`` with the test config's shared client options (batch, epochs, system) and
    its own defaults otherwise."""
    entry = CLIENT_SOLVERS.get(name)
    shared = {f.name: getattr(config.client.options, f.name)
              for f in dataclasses.fields(config.client.options)}
    allowed = {f.name for f in dataclasses.fields(entry.options_cls)}
    options = entry.options_cls(**{k: v for k, v in shared.items() if k in allowed})
    return entry.factory(options)


def server_broadcast(solver, x):
    """What a server method running ``solver`` broadcasts at the start (its server stage's, if any)."""
    stage = solver.server_stage()
    return stage.broadcast(stage.init(x, None)) if stage is not None else {}


def make_work(task, solver, client_ids, *, round_index=3, seed=7, learning_rate=0.05):
    """A round's work with non-trivial per-client states and broadcast (random, seeded), so that
    every correction term of a solver is exercised."""
    x = task.spec.flatten(task.model, dtype=task.dtype).clone()
    ids = torch.tensor(sorted(client_ids), dtype=torch.int64)
    generator = torch_generator(99, "backend-test")

    def noise(shape):
        return 0.01 * torch.randn(shape, generator=generator, dtype=torch.float64).to(task.dtype).to(x.device)

    states = {name: noise((len(ids), task.spec.dim)) for name in solver.client_state_names}
    broadcast = {name: noise(value.shape) if value.is_floating_point() else value
                 for name, value in server_broadcast(solver, x).items()}
    return RoundWork(round_index=round_index, seed=seed, params=x, client_ids=ids, client_states=states,
                     broadcast=broadcast, learning_rate=learning_rate)


SOLVERS = CLIENT_SOLVERS.names()

# How the clients of the small federation train: each scenario's overrides.
SCENARIOS = {
    # epochs mode, client sizes 61..72 with B = 16: partial last batches and 4 or 5 steps per client
    "epochs-partial-batches": ("client.batch_size=16", "client.epochs=1"),
    # two epochs, a batch that divides no client size
    "two-epochs": ("client.batch_size=23", "client.epochs=2"),
    # fixed steps (every client the same number of full batches)
    "fixed-steps": ("client.steps=4", "client.batch_size=8"),
    # Hybrid+: E ~ U{2..5} and B ~ U{10..n_i} per client: very unequal step counts
    "hybrid-plus": ("client.system=hybrid_plus",),
}
COHORT = [0, 2, 3, 7, 9]


def assert_same_round(reference, other, *, exact: bool, rtol: float = 1e-9, atol: float = 1e-12):
    """Two ``(cohort, new_states)`` results agree: bitwise when ``exact``, else to tolerance."""
    (a, states_a), (b, states_b) = reference, other

    def check(x, y, what):
        assert x.shape == y.shape and x.dtype == y.dtype, what
        if exact:
            assert torch.equal(x, y), what
        else:
            torch.testing.assert_close(y, x, rtol=rtol, atol=atol, msg=what)

    assert torch.equal(a.client_ids, b.client_ids)
    assert torch.equal(a.local_steps, b.local_steps)
    assert torch.equal(a.num_examples, b.num_examples)
    check(a.deltas, b.deltas, "deltas")
    check(a.train_loss, b.train_loss, "train_loss")
    assert a.extras.keys() == b.extras.keys()
    for name in a.extras:
        check(a.extras[name], b.extras[name], f"extras[{name}]")
    assert states_a.keys() == states_b.keys()
    for name in states_a:
        check(states_a[name], states_b[name], f"state[{name}]")


def round_on_cpu(result):
    """A ``(cohort, new_states)`` result with every tensor moved to the CPU (to compare devices)."""
    cohort, states = result
    moved = dataclasses.replace(cohort, **{f.name: getattr(cohort, f.name).cpu() for f in dataclasses.fields(cohort)
                                           if isinstance(getattr(cohort, f.name), torch.Tensor)},
                                extras={name: value.cpu() for name, value in cohort.extras.items()})
    return moved, {name: value.cpu() for name, value in states.items()}
