"""FedAU and the FedAU paper's aggregation baselines: hand computations, equivalences, and FedAU's
in-server weights against ``fedau_weights`` on the realised participation matrix."""
import pytest
import torch

from fedhet.core.cohort import Cohort
from fedhet.core.options import ConfigError
from fedhet.participation.full import FullOptions, make_full
from fedhet.participation.heterogeneous import HeterogeneousOptions, make_heterogeneous
from fedhet.participation.uniform import UniformOptions, make_uniform
from fedhet.server.fedau_weights import fedau_weights

from server_baseline_support import (ScriptedParticipation, assert_resume_is_bitwise, build_server, cohort,
                                     context, problem, simulator)

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
                    participation=heterogeneous(pattern), label_counts=label_counts(), rounds=rounds, seed=3)
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
    assert torch.equal(sim.server_state["aggregator"]["weights"]["omega"], omega[rounds])
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
                    participation=ScriptedParticipation(matrix), rounds=6)
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
                         label_counts=label_counts(), rounds=12, seed=5)
    assert_resume_is_bitwise(make, rounds=12, split=7)


def test_cutoff_must_be_positive_or_none():
    with pytest.raises(ConfigError, match="server.cutoff = 0: must be >= 1"):
        build_server("fedau", cutoff=0)
    assert build_server("fedau", cutoff="none").aggregator.cutoff is None
