import pytest
import torch

import fedhet.components  # noqa: F401
from fedhet.algorithms import server_for
from fedhet.algorithms.feddyn import LOCAL_GRADIENT, FedDynOptions
from fedhet.core.options import ConfigError
from fedhet.core.registry import CLIENT_SOLVERS
from fedhet.participation.uniform import UniformOptions, make_uniform
from fedhet.problems.least_squares import full_batch_options, make_least_squares
from fedhet.server.base import ServerOptions


def test_three_rounds_match_a_transcription_of_feddyn():
    """Acar et al. 2021, Algorithm 1, with partial participation (2 of 4 clients)."""
    num_clients, lr, steps, alpha = 4, 0.05, 4, 0.3
    problem = make_least_squares(num_clients=num_clients, dim=3, examples_per_client=10, seed=5)
    solver = CLIENT_SOLVERS.get("feddyn").factory(full_batch_options(problem, FedDynOptions, learning_rate=lr,
                                                                     steps=steps, alpha=alpha))
    sim = problem.simulator(solver=solver, server=server_for(solver, "feddyn", ServerOptions()),
                            participation=make_uniform(UniformOptions(clients_per_round=2)), seed=7)
    x = problem.initial_params.clone()
    h = torch.zeros(3, dtype=torch.float64)
    grad_l = torch.zeros(num_clients, 3, dtype=torch.float64)
    for _ in range(3):
        _, cohort = sim.run_round()
        models = []
        for client in cohort.client_ids.tolist():
            w = x.clone()
            for _ in range(steps):
                w = w - lr * (problem.client_gradient(client, w) - grad_l[client] + alpha * (w - x))
            grad_l[client] = grad_l[client] - alpha * (w - x)
            models.append(w)
        models = torch.stack(models)
        h = h - alpha * (models - x).sum(dim=0) / num_clients
        x = models.mean(dim=0) - h / alpha
    assert torch.allclose(sim.params, x, rtol=0, atol=1e-12)
    assert torch.allclose(sim.client_stores[LOCAL_GRADIENT].read_all(), grad_l, rtol=0, atol=1e-12)
    assert torch.allclose(sim.server_state.aggregator.h, h, rtol=0, atol=1e-12)


def test_feddyn_server_refuses_the_aware_projection():
    """FedDyn's server update is not a gradient step, so AWARE (Proposition 3.1) does not apply."""
    with pytest.raises(ConfigError, match="server.aware"):
        server_for(CLIENT_SOLVERS.get("feddyn").factory(FedDynOptions()), "feddyn", ServerOptions(aware=True))
