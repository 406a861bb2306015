import torch

import fedhet.components  # noqa: F401
from fedhet.algorithms import server_for
from fedhet.algorithms.scaffold import CONTROL_VARIATE, CONTROL_VARIATE_CHANGE
from fedhet.client.base import ClientOptions
from fedhet.core.registry import CLIENT_SOLVERS
from fedhet.participation.uniform import UniformOptions, make_uniform
from fedhet.problems.least_squares import full_batch_options, make_least_squares
from fedhet.server.base import ServerOptions


def test_three_rounds_match_a_transcription_of_scaffold_option_two():
    """Karimireddy et al. 2020, Algorithm 1 (option II), with partial participation (2 of 4 clients)
    and eta_g = 0.5: c is updated with 1/N, x with the mean over participants."""
    num_clients, lr, steps, server_lr = 4, 0.05, 4, 0.5
    problem = make_least_squares(num_clients=num_clients, dim=3, examples_per_client=10, seed=5)
    solver = CLIENT_SOLVERS.get("scaffold").factory(full_batch_options(problem, ClientOptions, learning_rate=lr,
                                                                       steps=steps))
    sim = problem.simulator(solver=solver, server=server_for(solver, "scaffold", ServerOptions(learning_rate=server_lr)),
                            participation=make_uniform(UniformOptions(clients_per_round=2)), seed=7)
    x = problem.initial_params.clone()
    c = torch.zeros(3, dtype=torch.float64)
    c_i = torch.zeros(num_clients, 3, dtype=torch.float64)
    for _ in range(3):
        _, cohort = sim.run_round()
        deltas, changes = [], []
        for client in cohort.client_ids.tolist():
            w = x.clone()
            for _ in range(steps):
                w = w - lr * (problem.client_gradient(client, w) - c_i[client] + c)
            new = c_i[client] - c + (x - w) / (steps * lr)
            changes.append(new - c_i[client])
            c_i[client] = new
            deltas.append(w - x)
        c = c + torch.stack(changes).sum(dim=0) / num_clients
        x = x + server_lr * torch.stack(deltas).mean(dim=0)
        assert torch.allclose(cohort.extras[CONTROL_VARIATE_CHANGE], torch.stack(changes), atol=1e-12)
    assert torch.allclose(sim.params, x, rtol=0, atol=1e-12)
    assert torch.allclose(sim.broadcast["control_variate"], c, rtol=0, atol=1e-12)
    assert torch.allclose(sim.client_stores[CONTROL_VARIATE].read_all(), c_i, rtol=0, atol=1e-12)


def test_finish_uses_each_clients_own_step_count_on_stacked_rows():
    """The vectorised shape: rows [K, d] and one step count per client."""
    solver = CLIENT_SOLVERS.get("scaffold").factory(ClientOptions())
    x = torch.tensor([1.0, 2.0])
    w = torch.tensor([[0.0, 1.0], [3.0, -1.0]])
    c = torch.tensor([0.5, -0.5])
    old = torch.tensor([[0.1, 0.2], [0.3, 0.4]])
    local = solver.begin(x, {CONTROL_VARIATE: old}, {"control_variate": c}, 0.1)
    _, state, extras = solver.finish(x, w, local, {CONTROL_VARIATE: old}, torch.tensor([2, 5]), 0.1)
    for k, steps in enumerate([2, 5]):
        row_local = solver.begin(x, {CONTROL_VARIATE: old[k]}, {"control_variate": c}, 0.1)
        _, row_state, _ = solver.finish(x, w[k], row_local, {CONTROL_VARIATE: old[k]}, steps, 0.1)
        assert torch.allclose(state[CONTROL_VARIATE][k], row_state[CONTROL_VARIATE])
        assert torch.allclose(row_state[CONTROL_VARIATE], old[k] - c + (x - w[k]) / (steps * 0.1))
    assert torch.allclose(extras[CONTROL_VARIATE_CHANGE], state[CONTROL_VARIATE] - old)
