import pytest
import torch

import fedhet.components  # noqa: F401
from fedhet.algorithms.fedprox import FedProxOptions
from fedhet.client.base import ClientOptions
from fedhet.client.proximal import prox_effective_steps
from fedhet.core.registry import CLIENT_SOLVERS, SERVERS
from fedhet.participation.uniform import UniformOptions, make_uniform
from fedhet.problems.least_squares import full_batch_options, make_least_squares
from fedhet.server.base import ServerOptions


def test_fedprox_with_mu_zero_equals_local_sgd_exactly():
    problem = make_least_squares(num_clients=4, dim=3, examples_per_client=12, seed=1)
    finals = []
    for name, options in [("sgd", ClientOptions(learning_rate=0.05, batch_size=5, epochs=2, weight_decay=1e-3)),
                          ("fedprox", FedProxOptions(learning_rate=0.05, batch_size=5, epochs=2, weight_decay=1e-3, mu=0.0))]:
        sim = problem.simulator(solver=CLIENT_SOLVERS.get(name).factory(options),
                                server=SERVERS.get("fedavg").factory(ServerOptions()),
                                participation=make_uniform(UniformOptions(clients_per_round=2)), seed=3)
        finals.append(sim.run(5))
    assert torch.equal(finals[0], finals[1])
    assert not torch.equal(finals[0], problem.initial_params)


def test_one_round_matches_a_transcription_of_fedprox():
    """Full participation, 3 full-batch steps of w <- w - eta_l (grad f_i(w) + mu (w - x)), FedAvg server."""
    problem = make_least_squares(num_clients=3, dim=3, examples_per_client=10, seed=2)
    lr, mu, steps = 0.1, 0.8, 3
    solver = CLIENT_SOLVERS.get("fedprox").factory(full_batch_options(problem, FedProxOptions, learning_rate=lr,
                                                                      steps=steps, mu=mu))
    sim = problem.simulator(solver=solver, server=SERVERS.get("fedavg").factory(ServerOptions()))
    x = problem.initial_params.clone()
    ends = []
    for client in range(3):
        w = x.clone()
        for _ in range(steps):
            w = w - lr * (problem.client_gradient(client, w) + mu * (w - x))
        ends.append(w)
    expected = torch.stack(ends).mean(dim=0)   # equal sizes: data weights are 1/3
    assert torch.allclose(sim.run(1), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("shrink", [0.0, 1e-9, 0.3, 1.0, 1.5])
def test_fednova_effective_steps_are_the_geometric_sum(shrink):
    steps = torch.tensor([1, 5, 17])
    lr = 0.1
    mu = shrink / lr
    expected = torch.tensor([sum((1 - lr * mu) ** k for k in range(int(n))) for n in steps], dtype=torch.float64)
    got = prox_effective_steps(steps, lr, mu)
    assert got.dtype == torch.float64
    assert torch.allclose(got, expected, rtol=1e-12, atol=1e-12)
    solver = CLIENT_SOLVERS.get("fedprox").factory(FedProxOptions(mu=mu))
    assert torch.allclose(solver.effective_steps(steps, lr), expected, rtol=1e-12, atol=1e-12)
