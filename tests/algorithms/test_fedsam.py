import torch

import fedhet.components  # noqa: F401
from fedhet.algorithms.fedsam import FedSAMOptions
from fedhet.client.base import ClientOptions
from fedhet.core.registry import CLIENT_SOLVERS, SERVERS
from fedhet.participation.uniform import UniformOptions, make_uniform
from fedhet.problems.least_squares import full_batch_options, make_least_squares
from fedhet.server.base import ServerOptions


def test_fedsam_with_rho_zero_equals_local_sgd_exactly():
    problem = make_least_squares(num_clients=4, dim=3, examples_per_client=12, seed=1)
    shared = dict(learning_rate=0.05, batch_size=5, epochs=2, weight_decay=1e-3, clip_norm=2.0)
    finals = []
    for name, options in [("sgd", ClientOptions(**shared)), ("fedsam", FedSAMOptions(rho=0.0, **shared))]:
        sim = problem.simulator(solver=CLIENT_SOLVERS.get(name).factory(options),
                                server=SERVERS.get("fedavg").factory(ServerOptions()),
                                participation=make_uniform(UniformOptions(clients_per_round=2)), seed=3)
        finals.append(sim.run(5))
    assert torch.equal(finals[0], finals[1])


def test_one_round_matches_a_transcription_of_local_sam():
    problem = make_least_squares(num_clients=2, dim=3, examples_per_client=10, seed=2)
    lr, rho, steps = 0.1, 0.2, 3
    solver = CLIENT_SOLVERS.get("fedsam").factory(full_batch_options(problem, FedSAMOptions, learning_rate=lr,
                                                                     steps=steps, rho=rho))
    sim = problem.simulator(solver=solver, server=SERVERS.get("fedavg").factory(ServerOptions()))
    x = problem.initial_params.clone()
    ends = []
    for client in range(2):
        w = x.clone()
        for _ in range(steps):
            g = problem.client_gradient(client, w)
            w = w - lr * problem.client_gradient(client, w + rho * g / torch.linalg.vector_norm(g))
        ends.append(w)
    assert torch.allclose(sim.run(1), torch.stack(ends).mean(dim=0), rtol=0, atol=1e-12)
