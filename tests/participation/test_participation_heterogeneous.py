"""FedAU's heterogeneous participation patterns: long-run rates, Markov transitions, cyclic runs.

One 20,000-round simulation of 300 clients per pattern (computed once, on first use), shared by
the tests.
"""
import functools

import numpy as np
import pytest
import torch

from fedhet.participation.base import ParticipationContext
from fedhet.participation.heterogeneous import (
    HeterogeneousOptions,
    cyclic_active,
    cyclic_phase_lengths,
    make_heterogeneous,
    markov_transition_probabilities,
)
from fedhet.participation.simulate import simulate_participation

NUM_CLIENTS, NUM_ROUNDS = 300, 20000


def label_context(num_clients=NUM_CLIENTS, seed=0):
    rng = np.random.default_rng(100 + seed)
    counts = np.round(rng.dirichlet([0.1] * 10, num_clients) * 300).astype(np.int64)
    counts[np.arange(num_clients), rng.integers(0, 10, num_clients)] += 1
    counts = torch.from_numpy(counts)
    return ParticipationContext(num_clients, seed, counts)


@functools.lru_cache(maxsize=None)
def simulated(pattern):
    """(state after init, [T, N] participation) for one pattern, computed once per test session."""
    ctx = label_context()
    process = make_heterogeneous(HeterogeneousOptions(pattern=pattern))
    state = process.init(ctx)
    return state, simulate_participation(process, ctx, NUM_ROUNDS)


@pytest.fixture
def runs():
    class Runs:
        def __getitem__(self, pattern):
            return simulated(pattern)
    return Runs()


def test_patterns_share_the_probabilities_and_they_look_like_the_papers():
    ctx = label_context()
    states = {pattern: make_heterogeneous(HeterogeneousOptions(pattern=pattern)).init(ctx)
              for pattern in ("bernoulli", "markov", "cyclic")}
    p = states["bernoulli"].probabilities
    for pattern in ("markov", "cyclic"):
        assert torch.equal(states[pattern].probabilities, p)
    assert float(p.min()) == 0.02 and float(p.max()) <= 1.0
    assert 0.05 < float(p.mean()) < 0.2                   # mean 0.1 before the floor


def test_bernoulli_long_run_rates_match_p(runs):
    # Per client: |rate - p| < 5 sqrt(p (1-p) / T).
    state, matrix = runs["bernoulli"]
    p = state.probabilities
    rates = matrix.double().mean(0)
    assert torch.all((rates - p).abs() < 5 * (p * (1 - p) / NUM_ROUNDS).sqrt() + 1e-12)


def test_markov_long_run_rates_match_p(runs):
    # The chain starts stationary, so the rate is unbiased; its variance is inflated by the
    # autocorrelation: Var = p (1-p) / T * (1 + lam) / (1 - lam), lam = 1 - P(off->on) - P(on->off).
    state, matrix = runs["markov"]
    p = state.probabilities
    lam = 1 - state.to_on - state.to_off
    sigma = (p * (1 - p) / NUM_ROUNDS * (1 + lam) / (1 - lam)).sqrt()
    rates = matrix.double().mean(0)
    assert torch.all((rates - p).abs() < 5 * sigma + 1e-12)


def test_markov_transition_probabilities_hand_values():
    p = torch.tensor([0.1, 0.5, 0.02, 0.0, 1.0], dtype=torch.float64)
    to_on, to_off = markov_transition_probabilities(p, 0.05)
    assert torch.allclose(to_on, torch.tensor([0.05, 0.05, 0.02 / 0.98, 0.0, 0.05], dtype=torch.float64))
    assert torch.allclose(to_off, torch.tensor([0.45, 0.05, 1.0, 1.0, 0.0], dtype=torch.float64))
    stationary = to_on / (to_on + to_off)
    assert torch.allclose(stationary, p)


def test_markov_empirical_transition_frequencies(runs):
    # Per client with enough visits: off->on frequency ~ P(off->on), on->off ~ P(on->off), 5 sigma
    # (binomial given the number of visits). Both the plain and the capped case must occur.
    state, matrix = runs["markov"]
    to_on, to_off = state.to_on, state.to_off
    capped = to_off == 1.0
    assert int(capped.sum()) > 10 and int((~capped).sum()) > 10
    assert torch.allclose(to_on[~capped], torch.full_like(to_on[~capped], 0.05))
    p = state.probabilities
    assert torch.allclose(to_off[~capped], 0.05 * (1 - p[~capped]) / p[~capped])
    assert torch.allclose(to_on[capped], p[capped] / (1 - p[capped]))
    before, after = matrix[:-1], matrix[1:]
    off_visits = (~before).sum(0).double()
    on_visits = before.sum(0).double()
    off_to_on = (~before & after).sum(0).double() / off_visits.clamp(min=1)
    on_to_off = (before & ~after).sum(0).double() / on_visits.clamp(min=1)
    checked = {"off": 0, "on_plain": 0, "on_capped": 0}
    for n in range(NUM_CLIENTS):
        if off_visits[n] >= 200:
            sd = (to_on[n] * (1 - to_on[n]) / off_visits[n]).sqrt()
            assert abs(off_to_on[n] - to_on[n]) < 5 * sd + 1e-12, n
            checked["off"] += 1
        if on_visits[n] >= 200:
            sd = (to_off[n] * (1 - to_off[n]) / on_visits[n]).sqrt()
            assert abs(on_to_off[n] - to_off[n]) < 5 * sd + 1e-12, n
            checked["on_capped" if capped[n] else "on_plain"] += 1
    assert min(checked.values()) > 10, checked
    # Capped clients leave after every single on round.
    assert torch.all(on_to_off[capped & (on_visits > 0)] == 1.0)


def test_cyclic_phase_lengths_hand_values():
    p = torch.tensor([0.1, 0.527, 0.02, 0.004, 0.005, 0.995, 1.0], dtype=torch.float64)
    on, off = cyclic_phase_lengths(p, 100)
    # round half to even: 0.5 -> 0 -> max(1, 0) = 1; 99.5 -> 100 -> off max(1, 0) = 1.
    assert on.tolist() == [10, 53, 2, 1, 1, 100, 100]
    assert off.tolist() == [90, 47, 98, 99, 99, 1, 1]


def test_cyclic_matches_a_transcription_of_the_authors_state_machine(runs):
    # The released FedAU code keeps a countdown per client: starts off with r_n rounds to go; in each
    # round, when the countdown is 0 it flips and restarts at the new phase length; then counts down.
    state, matrix = runs["cyclic"]
    for n in range(0, NUM_CLIENTS, 37):
        active, countdown = False, int(state.first_on[n])
        on_len = int(state.on_rounds[n])
        off_len = int(state.period[n]) - on_len
        for t in range(700):
            if countdown == 0:
                active = not active
                countdown = on_len if active else off_len
            countdown -= 1
            assert bool(matrix[t, n]) == active, (n, t)


def test_cyclic_rate_is_exact_over_whole_cycles(runs):
    state, matrix = runs["cyclic"]
    on, period = state.on_rounds, state.period
    for n in range(NUM_CLIENTS):
        cycles = NUM_ROUNDS // int(period[n])
        window = matrix[: cycles * int(period[n]), n]
        assert int(window.sum()) == cycles * int(on[n])
    # ... so over the whole run the rate is A_n / L_n to within one cycle.
    rates = matrix.double().mean(0)
    assert torch.all((rates - on / period).abs() <= period.double() / NUM_ROUNDS)


def run_lengths(column):
    values, lengths = torch.unique_consecutive(column, return_counts=True)
    return values.tolist(), lengths.tolist()


def test_cyclic_runs_are_exactly_on_and_off_phases(runs):
    state, matrix = runs["cyclic"]
    on, period, first_on = state.on_rounds, state.period, state.first_on
    off = period - on
    assert torch.all((first_on >= 0) & (first_on < off))           # starts in the off phase
    for n in range(NUM_CLIENTS):
        values, lengths = run_lengths(matrix[:, n])
        if first_on[n] > 0:
            assert values[0] is False and lengths[0] == int(first_on[n])
        else:
            assert values[0] is True
        for value, length in zip(values[1:-1], lengths[1:-1]):       # interior runs are whole phases
            assert length == (int(on[n]) if value else int(off[n])), n


def test_cyclic_offsets_are_spread_over_the_off_phase(runs):
    state, _ = runs["cyclic"]
    fraction = state.first_on.double() / (state.period - state.on_rounds).double()
    # U{0..off-1}/off is roughly uniform on [0, 1): mean 1/2 - 1/(2 off); 300 clients, 5 sigma.
    assert abs(float(fraction.mean()) - 0.5) < 0.02 + 5 * (1 / 12 / NUM_CLIENTS) ** 0.5


def test_cyclic_active_closed_form():
    first_on = torch.tensor([0, 3])
    on = torch.tensor([2, 1])
    period = torch.tensor([5, 4])
    pattern = torch.stack([cyclic_active(t, first_on, on, period) for t in range(10)])
    assert pattern[:, 0].tolist() == [True, True, False, False, False] * 2
    assert pattern[:, 1].tolist() == [False, False, False, True] * 2 + [False, False]


def test_markov_refuses_rounds_out_of_order():
    ctx = label_context(20)
    process = make_heterogeneous(HeterogeneousOptions(pattern="markov"))
    state = process.init(ctx)
    _, state = process.sample(state, 0, ctx)
    with pytest.raises(ValueError, match="round 1 comes next, got round 2"):
        process.sample(state, 2, ctx)


def test_rounds_may_be_empty_and_probabilities_are_float32():
    ctx = label_context(5)
    process = make_heterogeneous(HeterogeneousOptions(pattern="bernoulli", mean=0.05, floor=0.01))
    state = process.init(ctx)
    assert process.probabilities(state).dtype == torch.float32
    matrix = simulate_participation(process, ctx, 200)
    assert not bool(matrix.any(dim=1).all())


def test_label_counts_must_match_the_clients():
    ctx = label_context(10)
    bad = ParticipationContext(11, 0, ctx.client_label_counts)
    with pytest.raises(ValueError, match=r"expected \[N = 11, C\]"):
        make_heterogeneous(HeterogeneousOptions()).init(bad)


@pytest.mark.parametrize("pattern", ["bernoulli", "markov", "cyclic"])
def test_vectorised_simulation_equals_round_by_round_sampling(pattern):
    ctx = label_context(40, seed=3)
    process = make_heterogeneous(HeterogeneousOptions(pattern=pattern, cycle=20))
    state = process.init(ctx)
    rows = []
    for t in range(150):
        ids, state = process.sample(state, t, ctx)
        row = torch.zeros(40, dtype=torch.bool)
        row[ids] = True
        rows.append(row)
    assert torch.equal(simulate_participation(process, ctx, 150), torch.stack(rows))
    # From a mid-run state too (the Markov chain needs it).
    state = process.init(ctx)
    for t in range(60):
        _, state = process.sample(state, t, ctx)
    assert torch.equal(simulate_participation(process, ctx, 90, state=state, start_round=60),
                       torch.stack(rows[60:]))
