"""Every correction term must contribute its real gradient.

The released FedAWARE/FedLab FedDyn builds its regulariser from detached tensors: its gradient is
zero and the method silently becomes local SGD. Here each solver takes a step at a point ``w != x``
with non-zero per-client and global state, and the direction must differ from the plain minibatch
gradient by exactly the regulariser's analytic gradient (which is checked to be far from zero).
"""
import pytest
import torch

import fedhet.components  # noqa: F401  (registers the solvers)
from fedhet.core.options import build_options
from fedhet.core.registry import CLIENT_SOLVERS
from fedhet.problems.least_squares import make_least_squares

DIM = 3


def shared_buffer_grad_fn(problem, client_id):
    """Like the sequential backend: the returned gradient is one buffer, overwritten by the next call."""
    buffer = torch.empty(DIM, dtype=torch.float64)

    def grad_fn(point):
        buffer.copy_(problem.client_gradient(client_id, point))
        return problem.client_loss(client_id, point), buffer
    return grad_fn


def random_state(solver, generator):
    return {name: torch.randn(DIM, generator=generator, dtype=torch.float64) for name in solver.client_state_names}


# name, options, expected regulariser gradient (w, x, grad, client_state, broadcast) -> tensor
CASES = {
    "fedprox": ({"mu": 0.7}, lambda w, x, g, s, b: 0.7 * (w - x)),
    "scaffold": ({}, lambda w, x, g, s, b: b["control_variate"] - s["control_variate"]),
    "feddyn": ({"alpha": 0.3}, lambda w, x, g, s, b: -s["local_gradient"] + 0.3 * (w - x)),
    "fedadmm": ({"rho": 0.4}, lambda w, x, g, s, b: s["dual"] + 0.4 * (w - x)),
    # rho0 = 0 makes the quasi-gradient the plain gradient, isolating the prox and correction terms.
    "fedspeed": ({"rho0": 0.0, "alpha": 0.5, "prox_weight": 0.25},
                 lambda w, x, g, s, b: -s["prox_correction"] + 0.25 * (w - x)),
    "fedcm": ({"alpha": 0.2}, lambda w, x, g, s, b: 0.8 * b["momentum"] - 0.8 * g),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_direction_is_gradient_plus_the_analytic_regulariser_gradient(name):
    values, expected_fn = CASES[name]
    problem = make_least_squares(num_clients=2, dim=DIM, examples_per_client=8, seed=4)
    solver = CLIENT_SOLVERS.get(name).factory(build_options(CLIENT_SOLVERS.get(name).options_cls,
                                                            {"learning_rate": 0.1, **values}, section="client"))
    generator = torch.Generator().manual_seed(11)
    x = torch.randn(DIM, generator=generator, dtype=torch.float64)
    w = x + torch.randn(DIM, generator=generator, dtype=torch.float64)
    global_state = solver.init_global(x)
    # Give the global state a non-zero value too (SCAFFOLD's c, FedCM's Delta).
    global_state = {key: torch.randn(DIM, generator=generator, dtype=torch.float64) for key in global_state}
    broadcast = solver.broadcast(global_state)
    client_state = random_state(solver, generator)
    local = solver.begin(x, client_state, broadcast, 0.1)

    _, direction = solver.direction(w.clone(), x, shared_buffer_grad_fn(problem, 0), local)
    grad = problem.client_gradient(0, w)
    regulariser = direction - grad
    expected = expected_fn(w, x, grad, client_state, broadcast)
    assert float(torch.linalg.vector_norm(expected)) > 0.1   # the case really tests something
    assert torch.allclose(regulariser, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name, values", [("fedsam", {"rho": 0.3}), ("fedspeed", {"rho0": 0.3, "alpha": 1.0,
                                                                                    "prox_weight": 0.0})])
def test_perturbed_gradient_is_taken_at_the_ascent_point(name, values):
    """FedSAM and FedSpeed (alpha = 1): the gradient at ``w + rho g/||g||`` on the same batch."""
    problem = make_least_squares(num_clients=2, dim=DIM, examples_per_client=8, seed=4)
    entry = CLIENT_SOLVERS.get(name)
    solver = entry.factory(build_options(entry.options_cls, {"learning_rate": 0.1, **values}, section="client"))
    x = torch.zeros(DIM, dtype=torch.float64)
    w = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
    local = solver.begin(x, {n: torch.zeros(DIM, dtype=torch.float64) for n in solver.client_state_names}, {}, 0.1)
    loss, direction = solver.direction(w, x, shared_buffer_grad_fn(problem, 1), local)
    grad = problem.client_gradient(1, w)
    ascent = w + 0.3 * grad / torch.linalg.vector_norm(grad)
    assert torch.allclose(direction, problem.client_gradient(1, ascent), atol=1e-12)
    assert not torch.allclose(direction, grad, atol=1e-3)
    assert torch.allclose(loss, problem.client_loss(1, w))   # the loss reported is at w itself
