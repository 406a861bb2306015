"""FedVarp and MIFA: transcription on hand-made rounds, full-participation equivalences, empty rounds,
the incrementally kept sum over all clients, and checkpoint round trips."""
import pytest
import torch

from fedhet.core.cohort import Cohort
from fedhet.participation.full import FullOptions, make_full
from fedhet.participation.heterogeneous import HeterogeneousOptions, make_heterogeneous
from fedhet.participation.uniform import UniformOptions, make_uniform
from server_baseline_support import (
    ScriptedParticipation,
    assert_resume_is_bitwise,
    build_server,
    cohort,
    context,
    problem,
    simulator,
)

N, DIM = 4, 3
# Rounds as (participants, their pseudo-gradients); round 2 is empty.
ROUNDS = [([0, 2], [[1.0, 0.0, 2.0], [0.0, -1.0, 1.0]]),
          ([1, 2], [[3.0, 1.0, 0.0], [2.0, 2.0, -2.0]]),
          ([], []),
          ([0, 3], [[-1.0, 4.0, 0.5], [0.0, 0.0, 1.0]])]


def transcription(name, eta):
    """The papers' rules with an explicit dense table: FedVarp Algorithm 1 / MIFA Algorithm 1."""
    x, y, out = torch.zeros(DIM, dtype=torch.float64), torch.zeros(N, DIM, dtype=torch.float64), []
    for ids, rows in ROUNDS:
        g = torch.tensor(rows, dtype=torch.float64).reshape(len(ids), DIM)
        if name == "fedvarp":
            if ids:
                x = x - eta * ((g - y[ids]).mean(0) + y.mean(0))
                y[ids] = g
        else:
            if ids:
                y[ids] = g
            x = x - eta * y.mean(0)
        out.append(x.clone())
    return out


def run_direct(server):
    ctx = context(num_clients=N, dim=DIM)
    x = torch.zeros(DIM, dtype=torch.float64)
    state, out = server.init(x, ctx), []
    for ids, rows in ROUNDS:
        if ids:
            round_cohort = cohort(ids, -torch.tensor(rows, dtype=torch.float64))
        else:
            round_cohort = Cohort.empty(DIM, torch.float64, "cpu")
        x, state, _ = server.step(state, x, round_cohort, ctx)
        out.append(x.clone())
    return out, state


@pytest.mark.parametrize("name", ["fedvarp", "mifa"])
def test_rounds_follow_the_papers_rule(name):
    ours, _ = run_direct(build_server(name, learning_rate=0.5))
    for t, (a, b) in enumerate(zip(ours, transcription(name, 0.5))):
        assert torch.allclose(a, b, rtol=0, atol=1e-14), f"round {t}: {a} vs {b}"


def test_empty_round_fedvarp_takes_no_step_and_mifa_applies_the_stored_mean():
    fedvarp, _ = run_direct(build_server("fedvarp"))
    mifa, _ = run_direct(build_server("mifa"))
    assert torch.equal(fedvarp[2], fedvarp[1])
    # MIFA's table after round 1: y_0, y_1, y_2 set, y_3 never seen (zero).
    stored_mean = torch.tensor([1.0 + 3.0 + 2.0, 0.0 + 1.0 + 2.0, 2.0 + 0.0 - 2.0], dtype=torch.float64) / N
    assert torch.allclose(mifa[1] - mifa[2], stored_mean, rtol=0, atol=1e-15)


@pytest.mark.parametrize("name", ["fedvarp", "mifa"])
def test_full_participation_is_the_uniform_average_of_this_rounds_updates(name):
    federation = problem(5)
    finals = {}
    for server_name in (name, "average_participating"):
        sim = simulator(federation, build_server(server_name, learning_rate=0.9),
                        participation=make_full(FullOptions()), seed=2)
        finals[server_name] = sim.run(6)
    assert torch.allclose(finals[name], finals["average_participating"], rtol=1e-12, atol=1e-14)
    assert not torch.allclose(finals[name], federation.initial_params)


@pytest.mark.parametrize("name", ["fedvarp", "mifa"])
@pytest.mark.parametrize("store_dtype", ["float32", "bfloat16"])
def test_running_sum_equals_the_sum_of_the_stored_table(name, store_dtype):
    # The table rounds rows to the storage dtype; the float64 running sum must track the stored values.
    federation = problem(6)
    sim = simulator(federation, build_server(name, learning_rate=0.5), store_dtype=store_dtype,
                    participation=make_uniform(UniformOptions(clients_per_round=2)), seed=1)
    sim.run(30)
    state = sim.server_state.aggregator
    exact = state.memory.read_all().to(torch.float64).sum(0)
    assert torch.allclose(state.memory_sum, exact, rtol=1e-13, atol=1e-15)
    assert state.memory.table.dtype == getattr(torch, store_dtype)


@pytest.mark.parametrize("name", ["fedvarp", "mifa"])
def test_a_round_touches_only_the_participants_rows(name):
    server = build_server(name)
    ctx = context(num_clients=N, dim=DIM)
    x = torch.zeros(DIM, dtype=torch.float64)
    state = server.init(x, ctx)
    store = state.aggregator.memory

    def refuse(*args, **kwargs):
        raise AssertionError("a round must not read the whole N x d table")
    store.read_all = refuse
    server.step(state, x, cohort([1, 3], torch.ones(2, DIM, dtype=torch.float64)), ctx)
    assert store.written.tolist() == [False, True, False, True]
    assert torch.equal(store.table[[0, 2]], torch.zeros(2, DIM, dtype=torch.float64))


def test_memory_clients_seen_metric_counts_clients_ever_seen():
    matrix = torch.tensor([[1, 0, 0], [1, 1, 0], [0, 0, 0]], dtype=torch.bool)
    federation = problem(3)
    sim = simulator(federation, build_server("mifa"), participation=ScriptedParticipation(matrix))
    seen = [sim.run_round()[0]["memory_clients_seen"] for _ in range(3)]
    assert seen == [1.0, 2.0, 2.0]


@pytest.mark.parametrize("name", ["fedvarp", "mifa"])
@pytest.mark.parametrize("store_dtype", ["float64", "float32"])
def test_resumed_run_equals_uninterrupted_run(name, store_dtype):
    federation = problem(6)
    counts = torch.arange(1, 25).reshape(6, 4)
    process = make_heterogeneous(HeterogeneousOptions(alpha=0.5, mean=0.3, floor=0.05))   # has empty rounds

    def make():
        return simulator(federation, build_server(name, learning_rate=0.5), participation=process,
                         label_counts=counts, store_dtype=store_dtype, seed=4)
    assert_resume_is_bitwise(make, rounds=10, split=6)
