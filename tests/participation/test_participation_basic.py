"""uniform, bernoulli and full participation."""
import pytest
import torch

from fedhet.core.options import ConfigError
from fedhet.participation.base import ParticipationContext
from fedhet.participation.bernoulli import BernoulliOptions, effective_bernoulli_rate, make_bernoulli
from fedhet.participation.full import FullOptions, make_full
from fedhet.participation.simulate import simulate_participation
from fedhet.participation.uniform import UniformOptions, make_uniform


def context(num_clients, seed=0):
    counts = torch.ones(num_clients, 3, dtype=torch.int64)
    return ParticipationContext(num_clients, seed, counts)


def rounds(process, ctx, num_rounds):
    state = process.init(ctx)
    out = []
    for t in range(num_rounds):
        ids, state = process.sample(state, t, ctx)
        out.append(ids)
    return out


def test_uniform_draws_k_distinct_sorted_ids_in_range():
    ctx = context(37)
    for ids in rounds(make_uniform(UniformOptions(clients_per_round=7)), ctx, 200):
        assert ids.dtype == torch.int64 and ids.shape == (7,)
        assert torch.equal(ids, torch.sort(ids).values)
        assert len(set(ids.tolist())) == 7
        assert int(ids.min()) >= 0 and int(ids.max()) < 37


def test_uniform_same_seed_same_sequence_different_seed_different():
    process = make_uniform(UniformOptions(clients_per_round=5))
    first = rounds(process, context(50, seed=3), 30)
    again = rounds(process, context(50, seed=3), 30)
    other = rounds(process, context(50, seed=4), 30)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert sum(torch.equal(a, b) for a, b in zip(first, other)) < 3
    # Consecutive rounds are different draws too (keyed by round).
    assert sum(torch.equal(a, b) for a, b in zip(first, first[1:])) < 3


def test_uniform_marginal_rate_is_k_over_n():
    ctx = context(20)
    process = make_uniform(UniformOptions(clients_per_round=5))
    rates = simulate_participation(process, ctx, 4000).double().mean(0)
    sigma = (0.25 * 0.75 / 4000) ** 0.5
    assert torch.all((rates - 0.25).abs() < 5 * sigma)
    assert torch.allclose(process.probabilities(process.init(ctx)), torch.full((20,), 0.25))


def test_uniform_rejects_more_clients_than_exist():
    process = make_uniform(UniformOptions(clients_per_round=11))
    with pytest.raises(ConfigError, match=r"participation\.clients_per_round.*N = 10"):
        process.init(context(10))
    ids, _ = make_uniform(UniformOptions(clients_per_round=10)).sample({"num_clients": 10}, 0, context(10))
    assert torch.equal(ids, torch.arange(10))


def test_bernoulli_is_never_empty_even_when_empty_rounds_are_likely():
    ctx = context(5)
    # P(nobody) = 0.95^5 = 0.77 per attempt: most rounds need a redraw.
    matrix = simulate_participation(make_bernoulli(BernoulliOptions(ratio=0.05)), ctx, 2000)
    assert bool(matrix.any(dim=1).all())


def test_bernoulli_empirical_rate_matches_the_redraw_corrected_rate():
    num_clients, ratio, num_rounds = 10, 0.1, 8000
    process = make_bernoulli(BernoulliOptions(ratio=ratio))
    matrix = simulate_participation(process, context(num_clients, seed=1), num_rounds)
    effective = effective_bernoulli_rate(ratio, num_clients)
    assert effective == pytest.approx(0.1 / (1 - 0.9 ** 10))          # 0.1535, far from 0.1
    sigma = (effective * (1 - effective) / num_rounds) ** 0.5
    rates = matrix.double().mean(0)
    assert torch.all((rates - effective).abs() < 5 * sigma)           # per client, 5 sigma
    assert abs(float(rates.mean()) - effective) < 5 * sigma / num_clients ** 0.5
    assert torch.allclose(process.probabilities(process.init(context(num_clients))),
                          torch.full((num_clients,), ratio))


def test_bernoulli_same_seed_same_sequence():
    process = make_bernoulli(BernoulliOptions(ratio=0.3))
    a = simulate_participation(process, context(40, seed=9), 50)
    b = simulate_participation(process, context(40, seed=9), 50)
    c = simulate_participation(process, context(40, seed=10), 50)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_full_is_everyone_every_round():
    ctx = context(13)
    process = make_full(FullOptions())
    for ids in rounds(process, ctx, 5):
        assert torch.equal(ids, torch.arange(13))
    assert torch.equal(process.probabilities(process.init(ctx)), torch.ones(13))
