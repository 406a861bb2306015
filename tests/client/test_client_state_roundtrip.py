"""Checkpoint round trip: R rounds in one go equal r rounds, a save/load through bytes, and R - r more.

Minibatches (so the batch streams matter), partial participation (so stores hold untouched rows),
and every stateful solver with its server. Bitwise equality of the model, the per-client stores and
the solver's global state.
"""
import io

import pytest
import torch

import fedhet.components  # noqa: F401
from fedhet.algorithms import server_for
from fedhet.core.registry import CLIENT_SOLVERS
from fedhet.core.store import StoreOptions
from fedhet.engine import checkpoint
from fedhet.participation.uniform import UniformOptions, make_uniform
from fedhet.problems.least_squares import make_least_squares
from fedhet.server.base import ServerOptions

ROUNDS, SPLIT = 6, 3
CASES = [
    ("scaffold", "scaffold", {}),
    ("feddyn", "feddyn", {"alpha": 0.1}),
    ("fedcm", "fedavg", {"alpha": 0.5}),
    ("fedadmm", "fedadmm", {"rho": 0.2}),
    ("fedspeed", "fedspeed", {}),
    ("fedspeed", "fedspeed", {"variant": "released-code"}),
    ("fedprox", "fedavg", {"mu": 0.1}),
    ("fedsam", "fedavg", {"rho": 0.1}),
]


def build(problem, client, server, values, store_dtype="float64"):
    entry = CLIENT_SOLVERS.get(client)
    solver = entry.factory(entry.options_cls(learning_rate=0.05, batch_size=4, epochs=1, lr_decay=0.95, **values))
    return problem.simulator(solver=solver, server=server_for(solver, server, ServerOptions()),
                             participation=make_uniform(UniformOptions(clients_per_round=2)), seed=9,
                             store_options=StoreOptions(dtype=store_dtype))


def through_bytes(state):
    buffer = io.BytesIO()
    torch.save(checkpoint.to_saveable(state), buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


@pytest.mark.parametrize("client, server, values", CASES, ids=[c[0] + "-" + c[2].get("variant", "") for c in CASES])
def test_resumed_run_equals_uninterrupted_run(client, server, values):
    problem = make_least_squares(num_clients=4, dim=3, examples_per_client=10, seed=3)
    straight = build(problem, client, server, values)
    straight.run(ROUNDS)

    first = build(problem, client, server, values)
    first.run(SPLIT)
    saved = through_bytes(first.state_dict())
    resumed = build(problem, client, server, values)
    resumed.load_state(saved)
    resumed.run(ROUNDS - SPLIT)

    assert torch.equal(resumed.params, straight.params)
    assert not torch.equal(straight.params, problem.initial_params)
    for name in straight.solver.client_state_names:
        assert torch.equal(resumed.client_stores[name].read_all(), straight.client_stores[name].read_all())
        assert straight.client_stores[name].read_all().abs().sum() > 0
    for key, value in straight.broadcast.items():
        assert torch.equal(resumed.broadcast[key], value)
    if "h" in straight.server_state.aggregator:   # FedDyn's rule: server state too
        assert torch.equal(resumed.server_state.aggregator.h, straight.server_state.aggregator.h)


def test_solver_states_use_the_runs_store_dtype():
    problem = make_least_squares(num_clients=4, dim=3, examples_per_client=10, seed=3)
    sim = build(problem, "scaffold", "scaffold", {}, store_dtype="bfloat16")
    sim.run(2)
    store = sim.client_stores["control_variate"]
    assert store.table.dtype == torch.bfloat16
    assert int(store.written.sum()) >= 2 and torch.isfinite(sim.params).all()
