import torch

import fedhet.components  # noqa: F401
from fedhet.algorithms import server_for
from fedhet.algorithms.fedcm import FedCMOptions
from fedhet.client.base import ClientOptions
from fedhet.core.registry import CLIENT_SOLVERS
from fedhet.participation.uniform import UniformOptions, make_uniform
from fedhet.problems.least_squares import full_batch_options, make_least_squares
from fedhet.server.base import ServerOptions


def test_three_rounds_match_a_transcription_of_fedcm():
    """Xu et al. 2021: direction alpha grad + (1 - alpha) Delta, Delta = -mean_S delta / (K eta_l),
    zero in round 0; FedAvg server (equal sizes: plain mean)."""
    lr, steps, alpha, decay = 0.05, 4, 0.3, 0.9
    problem = make_least_squares(num_clients=4, dim=3, examples_per_client=10, seed=5)
    options = full_batch_options(problem, FedCMOptions, learning_rate=lr, steps=steps, alpha=alpha, lr_decay=decay)
    sim = problem.simulator(solver=(solver := CLIENT_SOLVERS.get("fedcm").factory(options)),
                            server=server_for(solver, "fedavg", ServerOptions()),
                            participation=make_uniform(UniformOptions(clients_per_round=2)), seed=7)
    x = problem.initial_params.clone()
    momentum = torch.zeros(3, dtype=torch.float64)
    for t in range(3):
        round_lr = lr * decay ** t
        _, cohort = sim.run_round()
        deltas = []
        for client in cohort.client_ids.tolist():
            w = x.clone()
            for _ in range(steps):
                w = w - round_lr * (alpha * problem.client_gradient(client, w) + (1 - alpha) * momentum)
            deltas.append(w - x)
        deltas = torch.stack(deltas)
        momentum = -deltas.mean(dim=0) / (steps * round_lr)
        x = x + deltas.mean(dim=0)
        assert torch.allclose(sim.broadcast["momentum"], momentum, rtol=0, atol=1e-12)
    assert torch.allclose(sim.params, x, rtol=0, atol=1e-12)


def test_fedcm_with_alpha_one_equals_local_sgd_exactly():
    problem = make_least_squares(num_clients=4, dim=3, examples_per_client=12, seed=1)
    finals = []
    for name, options in [("sgd", ClientOptions(learning_rate=0.05, batch_size=5, epochs=2)),
                          ("fedcm", FedCMOptions(learning_rate=0.05, batch_size=5, epochs=2, alpha=1.0))]:
        sim = problem.simulator(solver=(solver := CLIENT_SOLVERS.get(name).factory(options)),
                                server=server_for(solver, "fedavg", ServerOptions()),
                                participation=make_uniform(UniformOptions(clients_per_round=2)), seed=3)
        finals.append(sim.run(4))
    assert torch.equal(finals[0], finals[1])
