"""FedNova: equal steps give FedAvg, unequal steps are normalised by the solver's a_i, and the
normalisation removes the objective inconsistency of FedAvg under unequal local steps."""
import sys
from pathlib import Path

import torch

from fedhet.client.base import with_effective_steps
from fedhet.core.cohort import Cohort
from fedhet.participation.full import FullOptions, make_full
from fedhet.participation.uniform import UniformOptions, make_uniform
from fedhet.problems.least_squares import make_least_squares

# The server tests' shared helpers (tests/server/server_baseline_support.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
from server_baseline_support import (  # noqa: E402
    assert_resume_is_bitwise,
    build_server,
    build_solver,
    cohort,
    context,
    problem,
    simulator,
)


def unequal_step_problem():
    # Epoch mode with batch 4: clients take 1, 2, 4 and 8 local steps per epoch.
    return make_least_squares(num_clients=4, dim=3, examples_per_client=[4, 8, 16, 32], optimum_spread=1.0,
                              scale_spread=0.3, seed=1)


def test_equal_local_steps_give_fedavg():
    federation = problem(6)
    finals = {}
    for name in ("fedavg", "fednova"):
        sim = simulator(federation, build_server(name, learning_rate=0.9),
                        solver=build_solver("sgd", learning_rate=0.05, batch_size=3, steps=3),
                        participation=make_uniform(UniformOptions(clients_per_round=4)), seed=1)
        finals[name] = sim.run(6)
    assert torch.allclose(finals["fedavg"], finals["fednova"], rtol=1e-12, atol=1e-14)
    assert not torch.allclose(finals["fedavg"], federation.initial_params)


def test_unequal_steps_are_normalised_by_the_step_counts():
    federation, rate = unequal_step_problem(), 0.7
    sim = simulator(federation, build_server("fednova", learning_rate=rate),
                    solver=build_solver("sgd", learning_rate=0.05, batch_size=4, epochs=1),
                    participation=make_full(FullOptions()))
    before = sim.params.clone()
    metrics, round_cohort = sim.run_round()
    steps = round_cohort.local_steps.to(torch.float64)
    assert steps.tolist() == [1.0, 2.0, 4.0, 8.0]
    p = torch.tensor([4.0, 8.0, 16.0, 32.0], dtype=torch.float64) / 60
    tau_eff = float(p @ steps)
    expected = before - rate * tau_eff * (p / steps) @ round_cohort.pseudo_gradients
    assert torch.allclose(sim.params, expected, rtol=1e-12, atol=1e-14)
    assert metrics["fednova_tau_eff"] == tau_eff


def test_prox_solver_effective_steps_use_the_decayed_local_learning_rate():
    # FedProx: a_i = sum_{k < K_i} (1 - eta_l(t) mu)^k with eta_l(t) = eta_l gamma^t (FedNova, Section 4).
    federation, mu, eta_l, gamma = unequal_step_problem(), 2.0, 0.05, 0.8
    solver = build_solver("fedprox", mu=mu, learning_rate=eta_l, lr_decay=gamma, batch_size=4, epochs=1)
    sim = simulator(federation, build_server("fednova", learning_rate=1.0), solver=solver,
                    participation=make_full(FullOptions()))
    sim.run(2)
    before = sim.params.clone()
    metrics, round_cohort = sim.run_round()            # round t = 2
    shrink = 1 - eta_l * gamma ** 2 * mu
    a = torch.tensor([sum(shrink ** k for k in range(int(K))) for K in round_cohort.local_steps],
                     dtype=torch.float64)
    p = round_cohort.num_examples.to(torch.float64) / round_cohort.num_examples.sum()
    expected = before - float(p @ a) * (p / a) @ round_cohort.pseudo_gradients
    assert torch.allclose(sim.params, expected, rtol=1e-12, atol=1e-14)
    assert metrics["fednova_tau_eff"] == float(p @ a) != float(p @ round_cohort.local_steps.double())


def test_fednova_removes_the_objective_inconsistency_of_unequal_local_steps():
    # FedAvg with K_i local steps drifts towards the optimum of sum_i p_i K_i f_i (Wang et al. 2020,
    # Theorem 1); FedNova's fixed point is near the optimum of sum_i p_i f_i for small eta_l.
    federation = unequal_step_problem()
    distances = {}
    for name in ("fedavg", "fednova"):
        sim = simulator(federation, build_server(name), participation=make_full(FullOptions()),
                        solver=build_solver("sgd", learning_rate=0.02, batch_size=4, epochs=1))
        sim.run(40)
        distances[name] = federation.distance(sim.params)
    assert distances["fedavg"] > 0.2
    assert distances["fednova"] < 0.25 * distances["fedavg"]


def test_client_without_local_steps_contributes_nothing():
    ctx = context(num_clients=2, dim=2)
    server = build_server("fednova")
    x = torch.zeros(2, dtype=torch.float64)
    g = torch.tensor([[0.0, 0.0], [2.0, 4.0]], dtype=torch.float64)
    new_x, _, metrics = server.step(server.init(x, ctx), x, with_effective_steps(cohort([0, 1], -g, local_steps=[0, 2]), build_solver("sgd"), 0.0), ctx)
    # p = (1/2, 1/2), a = (0, 2): tau_eff = 1, G = 1 * (1/2) g_1 / 2.
    assert torch.allclose(new_x, -g[1] / 4, rtol=0, atol=1e-15)
    assert metrics["fednova_tau_eff"] == 1.0


def test_empty_round_takes_no_step():
    ctx = context(num_clients=2, dim=2)
    server = build_server("fednova")
    x = torch.ones(2, dtype=torch.float64)
    state = server.init(x, ctx)
    new_x, new_state, _ = server.step(state, x, Cohort.empty(2, torch.float64, "cpu"), ctx)
    assert torch.equal(new_x, x) and new_state == state


def test_resumed_run_equals_uninterrupted_run():
    federation = unequal_step_problem()

    def make():
        return simulator(federation, build_server("fednova", learning_rate=0.8),
                         solver=build_solver("fedprox", mu=0.5, learning_rate=0.05, lr_decay=0.9, batch_size=4,
                                             epochs=1),
                         participation=make_uniform(UniformOptions(clients_per_round=2)), seed=3)
    assert_resume_is_bitwise(make, rounds=6, split=2)


def test_algorithm_fednova_selects_local_sgd_and_the_fednova_server():
    from fedhet.config.schema import resolve_config
    config = resolve_config({"algorithm": "fednova"})
    assert (config.client.name, config.server.name) == ("sgd", "fednova")
