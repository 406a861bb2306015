"""FedAU and the FedAU paper's aggregation baselines: hand computations, equivalences, and FedAU's
in-server weights against ``fedau_weights`` on the realised participation matrix; the weights
themselves (Algorithm 2) against direct scalar transcriptions of Algorithm 2 and of the official
bookkeeping."""
from __future__ import annotations

import math

import pytest
import torch

from fedhet.algorithms.fedau import fedau_state_init, fedau_state_step, fedau_weights
from fedhet.core.cohort import Cohort
from fedhet.core.options import ConfigError
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

N = 6


def label_counts(num_clients=N, num_classes=4, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 20, (num_clients, num_classes), generator=generator) + 1


def heterogeneous(pattern="bernoulli"):
    # Mean 0.3 with N = 6: some rounds are empty (probability about 0.7^6), intervals vary.
    return make_heterogeneous(HeterogeneousOptions(pattern=pattern, alpha=0.5, mean=0.3, floor=0.05, cycle=6))


def record_rounds(sim, rounds):
    """``[(x_before, cohort, x_after, metrics)]`` for each round."""
    out = []
    for _ in range(rounds):
        before = sim.params.clone()
        metrics, round_cohort = sim.run_round()
        out.append((before, round_cohort, sim.params.clone(), metrics))
    return out


def test_average_participating_and_average_all_by_hand():
    g = torch.tensor([[1.0, 2.0], [3.0, -4.0]], dtype=torch.float64)
    ctx = context(num_clients=5, dim=2)
    x = torch.zeros(2, dtype=torch.float64)
    for name, expected in (("average_participating", g.mean(0)), ("average_all", g.sum(0) / 5)):
        server = build_server(name, learning_rate=0.5)
        new_x, _, _ = server.step(server.init(x, ctx), x, cohort([1, 3], -g), ctx)
        assert torch.allclose(new_x, -0.5 * expected, rtol=0, atol=1e-15)


def test_known_participation_weighs_by_inverse_probability():
    g = torch.tensor([[1.0, 2.0], [3.0, -4.0]], dtype=torch.float64)
    ctx = context(num_clients=3, dim=2, probabilities=torch.tensor([0.5, 0.25, 1.0]))
    server = build_server("known_participation", learning_rate=1.0)
    x = torch.zeros(2, dtype=torch.float64)
    new_x, _, metrics = server.step(server.init(x, ctx), x, cohort([0, 1], -g), ctx)
    assert torch.allclose(new_x, -(g[0] / 0.5 + g[1] / 0.25) / 3, rtol=0, atol=1e-15)
    assert metrics["known_weight_max"] == 4.0


def test_known_participation_without_probabilities_names_the_participation_process():
    federation = problem(N)
    scripted = ScriptedParticipation(torch.ones(3, N, dtype=torch.bool), probabilities=None)
    with pytest.raises(ValueError, match="participation.name"):
        simulator(federation, build_server("known_participation"), participation=scripted)


def test_known_participation_rejects_a_participant_with_zero_probability():
    ctx = context(num_clients=2, dim=1, probabilities=torch.tensor([0.0, 1.0]))
    server = build_server("known_participation")
    x = torch.zeros(1, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"clients \[0\].*p_n is 0"):
        server.step(server.init(x, ctx), x, cohort([0], torch.ones(1, 1, dtype=torch.float64)), ctx)


def test_uniform_sampling_known_participation_is_average_all_scaled_and_average_participating():
    federation, k = problem(N), 3          # p_n = k/N = 0.5 for every client
    finals = {}
    for name, rate in (("known_participation", 0.4), ("average_all", 0.4 * N / k), ("average_participating", 0.4)):
        sim = simulator(federation, build_server(name, learning_rate=rate),
                        participation=make_uniform(UniformOptions(clients_per_round=k)), seed=7)
        finals[name] = sim.run(6)
    assert torch.allclose(finals["known_participation"], finals["average_all"], rtol=1e-12, atol=1e-14)
    assert torch.allclose(finals["known_participation"], finals["average_participating"], rtol=1e-12, atol=1e-14)
    assert not torch.allclose(finals["known_participation"], federation.initial_params)


@pytest.mark.parametrize("cutoff", [50, None, 1])
def test_fedau_under_full_participation_is_the_uniform_average(cutoff):
    federation = problem(N)
    fedau = simulator(federation, build_server("fedau", learning_rate=0.8, cutoff=cutoff),
                      participation=make_full(FullOptions()))
    rounds = record_rounds(fedau, 5)
    assert all(metrics["fedau_weight_mean"] == 1.0 == metrics["fedau_weight_max"] for *_, metrics in rounds)
    plain = simulator(federation, build_server("average_participating", learning_rate=0.8),
                      participation=make_full(FullOptions()))
    assert torch.allclose(fedau.params, plain.run(5), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("cutoff", [3, None])
@pytest.mark.parametrize("pattern", ["bernoulli", "cyclic"])
def test_fedau_weights_inside_the_server_match_fedau_weights_on_the_realised_participation(cutoff, pattern):
    federation, rounds, rate = problem(N), 40, 0.6
    sim = simulator(federation, build_server("fedau", learning_rate=rate, cutoff=cutoff),
                    participation=heterogeneous(pattern), label_counts=label_counts(), seed=3)
    history = record_rounds(sim, rounds)
    realised = sim.participation_log
    assert bool((realised.sum(1) == 0).any()), "the schedule should contain empty rounds"
    assert int(realised.sum(0).min()) >= 2, "every client should participate more than once"
    # One extra (unused) row gives the weights of the next round, which the server state must hold.
    omega = fedau_weights(torch.cat([realised, torch.zeros(1, N, dtype=torch.bool)]), cutoff=cutoff)
    for t, (before, round_cohort, after, metrics) in enumerate(history):
        ids = round_cohort.client_ids
        assert torch.equal(ids, torch.nonzero(realised[t]).flatten())
        if len(ids) == 0:
            assert torch.equal(after, before)
            continue
        expected = before - rate * (omega[t, ids] / N) @ round_cohort.pseudo_gradients
        assert torch.allclose(after, expected, rtol=1e-12, atol=1e-14), f"round {t}"
        assert metrics["fedau_weight_mean"] == pytest.approx(float(omega[t, ids].mean()), rel=1e-12)
        assert metrics["fedau_weight_max"] == float(omega[t, ids].max())
    assert torch.equal(sim.server_state.aggregator.weights["omega"], omega[rounds])
    assert float(omega.max()) > 1.0


def test_fedau_state_advances_through_empty_rounds():
    # Client 0 trains in rounds 0, 3 and 5; rounds 1 and 2 are empty for everyone. Its intervals
    # (Algorithm 2): [0] closes in round 1 (length 1), [1, 2, 3] in round 4 (length 3), so its
    # weights at its participations are 1, 1 and (1 + 3) / 2 = 2. A state frozen during the empty
    # rounds would count the second interval as 1 and give weight 1 in round 5.
    matrix = torch.zeros(6, 2, dtype=torch.bool)
    matrix[[0, 3, 5], 0] = True
    matrix[[0, 4], 1] = True
    federation = problem(2, sizes=[6, 6])
    sim = simulator(federation, build_server("fedau", learning_rate=1.0, cutoff=None),
                    participation=ScriptedParticipation(matrix))
    history = record_rounds(sim, 6)
    weights_of_client_0 = [history[t][3]["fedau_weight_max"] for t in (0, 3)] + [
        history[5][3]["fedau_weight_mean"]]
    assert weights_of_client_0 == [1.0, 1.0, 2.0]
    assert torch.equal(history[1][0], history[1][2]) and torch.equal(history[2][0], history[2][2])


def test_fedau_refuses_rounds_out_of_order():
    server = build_server("fedau")
    x = torch.zeros(1, dtype=torch.float64)
    state = server.init(x, context(num_clients=2, dim=1))
    with pytest.raises(ValueError, match="expects round 0 but was called for round 2"):
        server.step(state, x, Cohort.empty(1, torch.float64, "cpu"), context(num_clients=2, dim=1, round_index=2))


CASES = [("fedau", {"cutoff": 4}), ("fedau", {"cutoff": None}), ("average_participating", {}),
         ("average_all", {}), ("known_participation", {})]


@pytest.mark.parametrize("name, values", CASES, ids=[f"{n}-{v}" for n, v in CASES])
def test_resumed_run_equals_uninterrupted_run(name, values):
    federation = problem(N)

    def make():
        return simulator(federation, build_server(name, learning_rate=0.5, **values), participation=heterogeneous(),
                         label_counts=label_counts(), seed=5)
    assert_resume_is_bitwise(make, rounds=12, split=7)


def test_cutoff_must_be_positive_or_none():
    with pytest.raises(ConfigError, match="server.cutoff = 0: must be >= 1"):
        build_server("fedau", cutoff=0)
    assert build_server("fedau", cutoff="none").aggregator.cutoff is None


# --- Algorithm 2: the weights ----------------------------------------------------------------------

def algorithm2_transcription(participation: list[list[bool]], cutoff: int | None) -> list[list[float]]:
    """FedAU paper, Algorithm 2, one client at a time with plain Python scalars.

    participation[t][n] is I_t^n; returns omega[t][n]. K = None means K = infinity.
    """
    num_rounds = len(participation)
    num_clients = len(participation[0]) if num_rounds else 0
    K = math.inf if cutoff is None else cutoff
    omega = [[0.0] * num_clients for _ in range(num_rounds)]
    for n in range(num_clients):
        M, S_open = 0, 0
        if num_rounds:
            omega[0][n] = 1.0
        for t in range(1, num_rounds):
            S_open = S_open + 1
            if participation[t - 1][n] or S_open == K:
                S = S_open
                if M == 0:
                    omega[t][n] = float(S)
                else:
                    omega[t][n] = (M * omega[t - 1][n] + S) / (M + 1)
                M = M + 1
                S_open = 0
            else:
                omega[t][n] = omega[t - 1][n]
    return omega


def official_code_weights_at_participation(participation: list[list[bool]], cutoff: int | None) -> dict:
    """The per-participation weights of the authors' released code, from its description
    (ALGORITHMS.md section 3): a counter of rounds without participation and a list of intervals;
    on participation the weight is the mean of the list (1 while it is empty), then counter + 1 is
    appended; otherwise the counter grows and is appended (and reset) when it reaches K.
    Returns {(t, n): weight} for every participation."""
    K = math.inf if cutoff is None else cutoff
    weights = {}
    for n in range(len(participation[0])):
        absent, intervals = 0, []
        for t, row in enumerate(participation):
            if row[n]:
                weights[(t, n)] = sum(intervals) / len(intervals) if intervals else 1.0
                intervals.append(absent + 1)
                absent = 0
            else:
                absent += 1
                if absent >= K:
                    intervals.append(absent)
                    absent = 0
    return weights


def random_participation(seed: int, num_rounds: int, num_clients: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    rates = torch.rand(num_clients, generator=generator) ** 3      # from very rare to frequent
    rates[0] = 0.0                                                 # a client that never participates
    if num_clients > 1:
        rates[1] = 1.0                                             # and one that always does
    return torch.rand(num_rounds, num_clients, generator=generator) < rates


CUTOFFS = [None, 1, 2, 5, 50]


@pytest.mark.parametrize("cutoff", CUTOFFS)
def test_matches_algorithm2_transcription_on_random_participation(cutoff):
    for seed in range(12):
        num_rounds = [1, 2, 7, 40, 150, 300][seed % 6]
        num_clients = 1 + (seed * 7) % 20
        participation = random_participation(seed, num_rounds, num_clients)
        weights = fedau_weights(participation, cutoff=cutoff)
        expected = torch.tensor(algorithm2_transcription(participation.tolist(), cutoff), dtype=torch.float64)
        assert weights.shape == (num_rounds, num_clients) and weights.dtype == torch.float64
        assert torch.equal(weights, expected.reshape(num_rounds, num_clients)), (seed, cutoff)


@pytest.mark.parametrize("cutoff", CUTOFFS)
def test_matches_official_code_at_every_participation(cutoff):
    for seed in range(8):
        participation = random_participation(100 + seed, 200, 15)
        weights = fedau_weights(participation, cutoff=cutoff)
        for (t, n), expected in official_code_weights_at_participation(participation.tolist(), cutoff).items():
            assert float(weights[t, n]) == pytest.approx(expected, rel=1e-12, abs=0), (seed, cutoff, t, n)


def test_incremental_steps_reproduce_the_matrix_row_by_row():
    participation = random_participation(3, 120, 9)
    expected = fedau_weights(participation, cutoff=5)
    state = fedau_state_init(9)
    assert torch.equal(state["omega"], expected[0])
    for t in range(1, 120):
        before = {key: value.clone() for key, value in state.items()}
        omega, new_state = fedau_state_step(state, participation[t - 1], 5)
        assert all(torch.equal(state[key], before[key]) for key in state)   # pure: input untouched
        assert torch.equal(omega, expected[t])
        state = new_state


def test_weights_never_look_at_the_current_round():
    participation = random_participation(4, 60, 6)
    flipped = participation.clone()
    flipped[37] = ~flipped[37]
    original, changed = fedau_weights(participation, cutoff=50), fedau_weights(flipped, cutoff=50)
    assert torch.equal(original[:38], changed[:38])
    assert not torch.equal(original[38:], changed[38:])


def test_first_participation_weight_is_one_without_cutoff_even_when_late():
    participation = torch.zeros(30, 3, dtype=torch.bool)
    participation[0, 0] = True          # first participation in round 0
    participation[17, 1] = True         # late first participation
    participation[[4, 9], 2] = True
    weights = fedau_weights(participation)
    assert float(weights[0, 0]) == 1.0
    assert float(weights[17, 1]) == 1.0
    assert float(weights[4, 2]) == 1.0
    # The first interval runs from "right before round 0" to the first participation.
    assert float(weights[18, 1]) == 18.0
    assert float(weights[5, 2]) == 5.0 and float(weights[10, 2]) == (5.0 + 5.0) / 2


def test_late_first_participation_with_cutoff_gets_the_cutoff_weight():
    # Algorithm 2 closes cut-off intervals of length K while the client is away (documented).
    participation = torch.zeros(20, 2, dtype=torch.bool)
    participation[3, 0] = True          # before K: weight 1
    participation[12, 1] = True         # after K = 5: intervals 5, 5 closed in rounds 5 and 10
    weights = fedau_weights(participation, cutoff=5)
    assert float(weights[3, 0]) == 1.0
    assert float(weights[12, 1]) == 5.0


def test_cutoff_one_gives_unit_weights():
    participation = random_participation(9, 50, 7)
    assert torch.equal(fedau_weights(participation, cutoff=1), torch.ones(50, 7, dtype=torch.float64))


@pytest.mark.parametrize("period", [1, 3, 10])
@pytest.mark.parametrize("offset", [0, 2])
def test_regular_period_converges_to_the_period(period, offset):
    num_rounds = 2000
    participation = torch.zeros(num_rounds, 1, dtype=torch.bool)
    participation[offset::period, 0] = True
    weights = fedau_weights(participation, cutoff=None)
    # Intervals: offset + 1 (from round 0 to the first participation), then period each time.
    t = num_rounds - 1
    collected = (t - 1 - offset) // period + 1
    first = offset + 1
    assert float(weights[t, 0]) == pytest.approx((first + (collected - 1) * period) / collected, rel=1e-12)
    assert abs(float(weights[t, 0]) - period) < 0.01 * period
    capped = fedau_weights(participation, cutoff=50)
    assert torch.allclose(capped, weights)           # intervals never reach K = 50


def test_never_participating_client():
    participation = torch.zeros(12, 1, dtype=torch.bool)
    assert torch.equal(fedau_weights(participation), torch.ones(12, 1, dtype=torch.float64))
    assert fedau_weights(participation, cutoff=4)[-1, 0].item() == 4.0


def test_empty_inputs():
    assert fedau_weights(torch.zeros(0, 3, dtype=torch.bool)).shape == (0, 3)
    assert fedau_weights(torch.zeros(4, 0, dtype=torch.bool)).shape == (4, 0)


@pytest.mark.parametrize("call, message", [
    (lambda: fedau_weights(torch.zeros(3, 2, dtype=torch.int64)), "torch.bool"),
    (lambda: fedau_weights(torch.zeros(3, dtype=torch.bool)), "2-D"),
    (lambda: fedau_weights([[True]]), "torch.bool tensor"),
    (lambda: fedau_weights(torch.zeros(3, 2, dtype=torch.bool), cutoff=0), "cutoff"),
    (lambda: fedau_weights(torch.zeros(3, 2, dtype=torch.bool), cutoff=2.0), "cutoff"),
    (lambda: fedau_weights(torch.zeros(3, 2, dtype=torch.bool), cutoff=True), "cutoff"),
    (lambda: fedau_state_step(fedau_state_init(3), torch.zeros(4, dtype=torch.bool)), r"shape \(3,\)"),
    (lambda: fedau_state_step(fedau_state_init(3), torch.zeros(3)), "torch.bool"),
    (lambda: fedau_state_step({"omega": torch.ones(3)}, torch.zeros(3, dtype=torch.bool)), "keys"),
    (lambda: fedau_state_init(-1), "num_clients"),
])
def test_clear_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()
