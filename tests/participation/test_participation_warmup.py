"""FedAWARE's exploration sweep and startup round, shared by every participation process."""
import math

import numpy as np
import pytest
import torch

from fedhet.participation.base import ParticipationContext
from fedhet.participation.bernoulli import BernoulliOptions, make_bernoulli
from fedhet.participation.full import FullOptions, make_full
from fedhet.participation.heterogeneous import HeterogeneousOptions, make_heterogeneous
from fedhet.participation.simulate import simulate_participation
from fedhet.participation.uniform import UniformOptions, make_uniform
from fedhet.participation.warmup import WarmedUpProcess, with_warmup


def label_context(num_clients, seed=0):
    rng = np.random.default_rng(seed)
    counts = np.round(rng.dirichlet([0.1] * 10, num_clients) * 200).astype(np.int64)
    counts[np.arange(num_clients), rng.integers(0, 10, num_clients)] += 1
    counts = torch.from_numpy(counts)
    return ParticipationContext(num_clients, seed, counts)


# (factory, options class, process options): every registered process.
PROCESSES = {
    "uniform": (make_uniform, UniformOptions, {"clients_per_round": 5}),
    "bernoulli": (make_bernoulli, BernoulliOptions, {"ratio": 0.2}),
    "full": (make_full, FullOptions, {}),
    "heterogeneous-bernoulli": (make_heterogeneous, HeterogeneousOptions, {"pattern": "bernoulli"}),
    "heterogeneous-markov": (make_heterogeneous, HeterogeneousOptions, {"pattern": "markov"}),
    "heterogeneous-cyclic": (make_heterogeneous, HeterogeneousOptions, {"pattern": "cyclic", "cycle": 10}),
}


def build(name, **warmup):
    factory, options_cls, options = PROCESSES[name]
    return factory(options_cls(**options, **warmup))


def rounds_as_sets(process, ctx, num_rounds):
    state = process.init(ctx)
    out = []
    for t in range(num_rounds):
        ids, state = process.sample(state, t, ctx)
        assert ids.dtype == torch.int64 and torch.equal(ids, torch.sort(ids).values)
        out.append(ids.tolist())
    return out


def test_without_warmup_options_the_process_is_not_wrapped():
    assert not isinstance(build("uniform"), WarmedUpProcess)
    assert isinstance(build("uniform", explore=True), WarmedUpProcess)
    assert isinstance(build("full", startup_round=True), WarmedUpProcess)
    bare = build("uniform")
    assert with_warmup(bare, UniformOptions()) is bare


@pytest.mark.parametrize("warmup", [{}, {"explore": True}, {"startup_round": True},
                                    {"explore": True, "startup_round": True}])
@pytest.mark.parametrize("name", sorted(PROCESSES))
def test_every_process_answers_the_typed_warmup_query(name, warmup):
    # What the simulator hands the server as ServerContext.participation_explore (FedAWARE's and
    # AWARE's FedAvg phase): the explore option, and nothing else (the startup round is no sweep).
    assert build(name, **warmup).explores() is bool(warmup.get("explore"))


def test_explore_sweeps_every_client_exactly_once_with_k_per_round():
    ctx = label_context(23)
    k = 5
    rounds = rounds_as_sets(build("uniform", explore=True), ctx, 12)
    sweep = rounds[:math.ceil(23 / k)]
    assert [len(r) for r in sweep] == [5, 5, 5, 5, 3]
    assert sorted(sum(sweep, [])) == list(range(23))            # everyone, exactly once
    assert sweep[0] != list(range(5))                           # a random order, not by id


@pytest.mark.parametrize("name", sorted(PROCESSES))
def test_explore_sweep_then_the_process_own_rounds_from_its_round_zero(name):
    ctx = label_context(40, seed=2)
    bare = build(name)
    expected = bare.probabilities(bare.init(ctx)).double().sum()
    k = max(1, min(40, int(round(float(expected)))))
    width = math.ceil(40 / k)
    swept = rounds_as_sets(build(name, explore=True), ctx, width + 30)
    sweep = swept[:width]
    assert all(len(r) == k for r in sweep[:-1]) and sorted(sum(sweep, [])) == list(range(40))
    assert swept[width:] == rounds_as_sets(bare, ctx, 30)


@pytest.mark.parametrize("name", sorted(PROCESSES))
def test_startup_round_zero_is_everyone_then_the_process_starts(name):
    ctx = label_context(30, seed=1)
    for warmup in ({"startup_round": True}, {"startup_round": True, "explore": True}):
        rounds = rounds_as_sets(build(name, **warmup), ctx, 26)
        assert rounds[0] == list(range(30))
        assert rounds[1:] == rounds_as_sets(build(name), ctx, 25)


def test_heterogeneous_sweep_size_is_the_expected_number_per_round():
    ctx = label_context(250)
    process = build("heterogeneous-markov", explore=True)
    state = process.init(ctx)
    expected = float(process.probabilities(state).double().sum())
    assert state.sweep_size == round(expected)
    assert state.rounds == math.ceil(250 / round(expected))
    assert torch.allclose(process.probabilities(state), build("heterogeneous-markov").probabilities(
        build("heterogeneous-markov").init(ctx)))


def test_full_explore_is_a_single_round_of_everyone():
    ctx = label_context(9)
    matrix = simulate_participation(build("full", explore=True), ctx, 3)
    assert bool(matrix.all())
    assert build("full", explore=True).init(ctx).rounds == 1


def test_sweep_is_seeded():
    a = rounds_as_sets(build("uniform", explore=True), label_context(23, seed=5), 5)
    b = rounds_as_sets(build("uniform", explore=True), label_context(23, seed=5), 5)
    c = rounds_as_sets(build("uniform", explore=True), label_context(23, seed=6), 5)
    assert a == b and a != c
