"""Drive a registered server method with a chosen pseudo-gradient sequence, and drive torch.optim with
the same sequence as ``.grad``: the tests of the server optimisers (FedAvgM, Reddi et al.'s adaptive
methods, FedAMS) compare the two.

A cohort of one client uploading ``delta = -G`` makes FedAvg's aggregate exactly ``G``, so the whole
registered server (aggregator + optimiser + compose) sees the chosen ``G``.
"""
import torch

from fedhet.core.cohort import Cohort
from fedhet.participation.uniform import UniformOptions, make_uniform
from server_baseline_support import (
    assert_resume_is_bitwise,
    assert_states_equal,
    build_server,
    cohort,
    context,
    problem,
    simulator,
)

DIM, STEPS = 5, 15


def gradient_sequence(seed=0):
    """Pseudo-gradients whose scale changes over time (so Yogi's sign and AMS's max both switch)."""
    generator = torch.Generator().manual_seed(seed)
    scales = torch.tensor([1.0, 3.0, 0.1, 0.5, 2.0] * 3, dtype=torch.float64)
    return [scales[t] * torch.randn(DIM, generator=generator, dtype=torch.float64) for t in range(STEPS)]


def run_server(server, x0, gradients):
    """Apply ``server`` to the sequence; returns the iterates after each step."""
    ctx = context(num_clients=1, dim=DIM)
    state = server.init(x0, ctx)
    params, out = x0.clone(), []
    for gradient in gradients:
        params, state, _ = server.step(state, params, cohort([0], -gradient.unsqueeze(0)), ctx)
        out.append(params.clone())
    return out


def run_torch(optimizer_cls, x0, gradients, *, prefill=None, **kwargs):
    param = torch.nn.Parameter(x0.clone())
    optimizer = optimizer_cls([param], foreach=False, **kwargs)
    if prefill is not None:
        # Start torch's optimiser from the paper's initial state (e.g. v_0 = tau^2) instead of zeros.
        optimizer.state[param] = prefill(param)
    out = []
    for gradient in gradients:
        param.grad = gradient.clone()
        optimizer.step()
        out.append(param.detach().clone())
    return out


def assert_sequences_close(ours, theirs):
    for t, (a, b) in enumerate(zip(ours, theirs)):
        assert torch.allclose(a, b, rtol=1e-11, atol=1e-13), f"step {t}: {a} vs {b}"


X0 = torch.linspace(-1.0, 1.0, DIM, dtype=torch.float64)


def check_empty_round_takes_no_step_and_keeps_the_optimizer_state(name):
    server = build_server(name)
    ctx = context(num_clients=3, dim=DIM)
    state = server.init(X0, ctx)
    params, state, _ = server.step(state, X0, cohort([1], -torch.ones(1, DIM, dtype=torch.float64)), ctx)
    new_params, new_state, metrics = server.step(state, params, Cohort.empty(DIM, torch.float64, "cpu"), ctx)
    assert torch.equal(new_params, params)
    assert_states_equal(new_state, state)
    assert "update_norm" not in metrics


def check_resumed_run_equals_uninterrupted_run(name, **values):
    federation = problem(6)

    def make():
        return simulator(federation, build_server(name, learning_rate=0.05, **values),
                         participation=make_uniform(UniformOptions(clients_per_round=3)), seed=2)
    assert_resume_is_bitwise(make, rounds=6, split=3)
