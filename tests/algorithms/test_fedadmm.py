import torch

import fedhet.components  # noqa: F401
from fedhet.algorithms import server_for
from fedhet.algorithms.fedadmm import ANCHOR_OFFSET, DUAL, FedADMMOptions
from fedhet.core.registry import CLIENT_SOLVERS
from fedhet.participation.uniform import UniformOptions, make_uniform
from fedhet.problems.least_squares import full_batch_options, make_least_squares
from fedhet.server.base import ServerOptions


def test_rounds_match_a_transcription_of_fedadmm():
    """Wang et al. 2022, Algorithm 1, with partial participation (2 of 4 clients): theta_i = w_i + y_i/rho
    starts at x^0, the server adds (eta_g/N) sum_S (theta_i+ - theta_i)."""
    num_clients, lr, steps, rho = 4, 0.05, 4, 0.5
    problem = make_least_squares(num_clients=num_clients, dim=3, examples_per_client=10, seed=5)
    solver = CLIENT_SOLVERS.get("fedadmm").factory(full_batch_options(problem, FedADMMOptions, learning_rate=lr,
                                                                      steps=steps, rho=rho))
    sim = problem.simulator(solver=solver, server=server_for(solver, "fedadmm", ServerOptions()),
                            participation=make_uniform(UniformOptions(clients_per_round=2)), seed=7)
    x0 = problem.initial_params.clone()
    x = x0.clone()
    dual = torch.zeros(num_clients, 3, dtype=torch.float64)
    theta = x0.repeat(num_clients, 1)
    for _ in range(4):
        _, cohort = sim.run_round()
        changes = []
        for client in cohort.client_ids.tolist():
            w = x.clone()
            for _ in range(steps):
                w = w - lr * (problem.client_gradient(client, w) + dual[client] + rho * (w - x))
            dual[client] = dual[client] + rho * (w - x)
            new_theta = w + dual[client] / rho
            changes.append(new_theta - theta[client])
            theta[client] = new_theta
        assert torch.allclose(cohort.deltas, torch.stack(changes), rtol=0, atol=1e-12)
        x = x + torch.stack(changes).sum(dim=0) / num_clients
        assert torch.allclose(sim.params, x, rtol=0, atol=1e-12)
        # With eta_g = 1 the server model is the mean of all clients' theta_i (participants or not).
        assert torch.allclose(sim.params, theta.mean(dim=0), rtol=0, atol=1e-12)
    assert torch.allclose(sim.client_stores[DUAL].read_all(), dual, rtol=0, atol=1e-12)
    assert torch.allclose(sim.client_stores[ANCHOR_OFFSET].read_all() + x0, theta, rtol=0, atol=1e-12)
