"""System heterogeneity end to end: under Hybrid+ every client reports its own step count.

FedNova's a_i and SCAFFOLD's c_i+ use the reported ``K_i``; it must be the plan's count, and it
must vary across clients and rounds (FedAWARE gradient-diversity paper, Section 5: E ~ U{2..5},
B ~ U{10..|D_i|} per client and round).
"""
import torch

import fedhet.components  # noqa: F401
from fedhet.client.base import ClientOptions
from fedhet.client.schedule import plan_local_work
from fedhet.core.registry import CLIENT_SOLVERS, SERVERS
from fedhet.problems.least_squares import make_least_squares
from fedhet.server.base import ServerOptions


def test_reported_local_steps_are_the_hybrid_plus_plans_and_vary():
    sizes = [30, 40, 50, 60]
    problem = make_least_squares(num_clients=4, dim=3, examples_per_client=sizes, seed=1)
    options = ClientOptions(learning_rate=0.01, system="hybrid_plus")
    sim = problem.simulator(solver=CLIENT_SOLVERS.get("sgd").factory(options),
                            server=SERVERS.get("fedavg").factory(ServerOptions()), seed=4)
    steps = []
    for round_index in range(4):
        _, cohort = sim.run_round()
        expected = [plan_local_work(sizes[c], batch_size=options.batch_size, epochs=options.epochs, steps=0,
                                    system="hybrid_plus", seed=4, round_index=round_index, client_id=c).num_steps
                    for c in range(4)]
        assert cohort.local_steps.tolist() == expected
        steps.append(expected)
    steps = torch.tensor(steps)                                      # [rounds, clients]
    assert all(len(set(row.tolist())) > 1 for row in steps)          # differ across clients in a round
    assert all(len(set(col.tolist())) > 1 for col in steps.T)        # differ across rounds for a client
