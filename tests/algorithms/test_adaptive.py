"""Server momentum and adaptive server optimisers against torch.optim and direct transcriptions.

A cohort of one client uploading ``delta = -G`` makes FedAvg's aggregate exactly ``G``, so the whole
registered server (aggregator + optimiser + compose) is driven with a chosen pseudo-gradient
sequence and compared with ``torch.optim`` fed the same sequence as ``.grad``.
"""
import pytest
import torch

from fedhet.core.cohort import Cohort
from fedhet.core.options import ConfigError
from fedhet.participation.uniform import UniformOptions, make_uniform
from fedhet.algorithms.adaptive import AdaptiveOptions
from fedhet.algorithms.fedams import AMSOptions

from server_baseline_support import (assert_resume_is_bitwise, assert_states_equal, build_server, cohort, context,
                                     problem, simulator)

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


def test_fedavgm_is_torch_sgd_with_heavy_ball_momentum():
    gradients = gradient_sequence()
    ours = run_server(build_server("fedavgm", learning_rate=0.3, momentum=0.9), X0, gradients)
    theirs = run_torch(torch.optim.SGD, X0, gradients, lr=0.3, momentum=0.9, dampening=0.0)
    assert_sequences_close(ours, theirs)


def test_fedadam_with_bias_correction_is_torch_adam_started_at_v0_tau_squared():
    gradients, tau = gradient_sequence(1), 0.05
    ours = run_server(build_server("fedadam", learning_rate=0.1, beta1=0.8, beta2=0.95, tau=tau,
                                   bias_correction=True), X0, gradients)

    def prefill(param):
        return {"step": torch.tensor(0.0), "exp_avg": torch.zeros_like(param),
                "exp_avg_sq": torch.full_like(param, tau ** 2)}
    theirs = run_torch(torch.optim.Adam, X0, gradients, prefill=prefill, lr=0.1, betas=(0.8, 0.95), eps=tau)
    assert_sequences_close(ours, theirs)


def test_fedadagrad_with_zero_beta1_is_torch_adagrad_with_initial_accumulator_tau_squared():
    gradients, tau = gradient_sequence(2), 0.02
    for correction in (False, True):      # with b1 = 0 the correction 1 - b1^t is 1
        ours = run_server(build_server("fedadagrad", learning_rate=0.2, beta1=0.0, tau=tau,
                                       bias_correction=correction), X0, gradients)
        theirs = run_torch(torch.optim.Adagrad, X0, gradients, lr=0.2, initial_accumulator_value=tau ** 2, eps=tau)
        assert_sequences_close(ours, theirs)


def test_fedamsgrad_with_bias_correction_is_torch_amsgrad():
    gradients = gradient_sequence(3)
    ours = run_server(build_server("fedamsgrad", learning_rate=0.1, beta1=0.9, beta2=0.99, eps=1e-3,
                                   bias_correction=True), X0, gradients)
    theirs = run_torch(torch.optim.Adam, X0, gradients, lr=0.1, betas=(0.9, 0.99), eps=1e-3, amsgrad=True)
    assert_sequences_close(ours, theirs)


def reddi_algorithm_2(rule, x0, gradients, *, eta, b1, b2, tau):
    """Reddi et al. (2021), Algorithm 2, written out with Delta_t = -G_t and x <- x + eta m/(sqrt(v)+tau)."""
    x, m, v = x0.clone(), torch.zeros_like(x0), torch.full_like(x0, tau ** 2)
    out = []
    for g in gradients:
        delta = -g
        m = b1 * m + (1 - b1) * delta
        if rule == "adagrad":
            v = v + delta ** 2
        elif rule == "adam":
            v = b2 * v + (1 - b2) * delta ** 2
        else:
            v = v - (1 - b2) * delta ** 2 * torch.sign(v - delta ** 2)
        x = x + eta * m / (torch.sqrt(v) + tau)
        out.append(x.clone())
    return out


@pytest.mark.parametrize("rule", ["adagrad", "adam", "yogi"])
def test_reddi_methods_without_bias_correction_follow_algorithm_2(rule):
    gradients = gradient_sequence(4)
    ours = run_server(build_server(f"fed{rule}", learning_rate=0.05, beta1=0.9, beta2=0.99, tau=1e-2), X0, gradients)
    assert_sequences_close(ours, reddi_algorithm_2(rule, X0, gradients, eta=0.05, b1=0.9, b2=0.99, tau=1e-2))


def test_yogi_differs_from_adam_once_v_exceeds_g_squared():
    # The sequence shrinks after a large gradient: Adam's v decays multiplicatively, Yogi's additively.
    gradients = gradient_sequence(5)
    yogi = run_server(build_server("fedyogi", tau=1e-2), X0, gradients)
    adam = run_server(build_server("fedadam", tau=1e-2), X0, gradients)
    assert not torch.allclose(yogi[-1], adam[-1])


def wang_fedams(rule, x0, gradients, *, eta, b1, b2, eps):
    """Wang, Lin, Chen (2022), Algorithm 2 (FedAMS) and its AMSGrad variant, with Delta_t = -G_t."""
    x, m, v = x0.clone(), torch.zeros_like(x0), torch.zeros_like(x0)
    vhat = torch.full_like(x0, eps) if rule == "ams" else torch.zeros_like(x0)
    out = []
    for g in gradients:
        m = b1 * m + (1 - b1) * (-g)
        v = b2 * v + (1 - b2) * g ** 2
        if rule == "ams":
            vhat = torch.maximum(torch.maximum(vhat, v), torch.full_like(v, eps))
            x = x + eta * m / torch.sqrt(vhat)
        else:
            vhat = torch.maximum(vhat, v)
            x = x + eta * m / (torch.sqrt(vhat) + eps)
        out.append(x.clone())
    return out


@pytest.mark.parametrize("rule", ["ams", "amsgrad"])
def test_fedams_variants_follow_their_algorithm(rule):
    gradients = gradient_sequence(6)
    ours = run_server(build_server(f"fed{rule}", learning_rate=0.1, eps=0.5), X0, gradients)
    assert_sequences_close(ours, wang_fedams(rule, X0, gradients, eta=0.1, b1=0.9, b2=0.99, eps=0.5))


def test_fedams_eps_floor_limits_the_step_where_fedamsgrad_adds_it():
    # A tiny gradient: FedAMS divides by sqrt(eps) (vhat floored at eps), FedAMSGrad by sqrt(v) + eps.
    g = [torch.full((DIM,), 1e-4, dtype=torch.float64)]
    eps, eta, b1, b2 = 0.01, 1.0, 0.9, 0.99
    ams = run_server(build_server("fedams", learning_rate=eta, eps=eps), X0, g)[0]
    amsgrad = run_server(build_server("fedamsgrad", learning_rate=eta, eps=eps), X0, g)[0]
    m = (1 - b1) * 1e-4
    assert torch.allclose(X0 - ams, torch.full((DIM,), eta * m / eps ** 0.5, dtype=torch.float64))
    v = (1 - b2) * 1e-8
    assert torch.allclose(X0 - amsgrad, torch.full((DIM,), eta * m / (v ** 0.5 + eps), dtype=torch.float64))


def test_bias_correction_is_off_by_default():
    assert AdaptiveOptions().bias_correction is False and AMSOptions().bias_correction is False


def test_fedavgm_with_zero_momentum_is_fedavg_bit_for_bit():
    federation = problem(6)
    runs = {}
    for name, values in (("fedavg", {}), ("fedavgm", {"momentum": 0.0})):
        sim = simulator(federation, build_server(name, learning_rate=0.7, **values),
                        participation=make_uniform(UniformOptions(clients_per_round=3)), seed=4)
        runs[name] = sim.run(5)
    assert torch.equal(runs["fedavg"], runs["fedavgm"])


@pytest.mark.parametrize("name", ["fedavgm", "fedadagrad", "fedadam", "fedyogi", "fedams", "fedamsgrad"])
def test_empty_round_takes_no_step_and_keeps_the_optimizer_state(name):
    server = build_server(name)
    ctx = context(num_clients=3, dim=DIM)
    state = server.init(X0, ctx)
    params, state, _ = server.step(state, X0, cohort([1], -torch.ones(1, DIM, dtype=torch.float64)), ctx)
    new_params, new_state, metrics = server.step(state, params, Cohort.empty(DIM, torch.float64, "cpu"), ctx)
    assert torch.equal(new_params, params)
    assert_states_equal(new_state, state)
    assert "update_norm" not in metrics


@pytest.mark.parametrize("name", ["fedavgm", "fedadagrad", "fedadam", "fedyogi", "fedams", "fedamsgrad"])
def test_resumed_run_equals_uninterrupted_run(name):
    federation = problem(6)
    values = {"bias_correction": True} if name != "fedavgm" else {}

    def make():
        return simulator(federation, build_server(name, learning_rate=0.05, **values),
                         participation=make_uniform(UniformOptions(clients_per_round=3)), seed=2, rounds=6)
    assert_resume_is_bitwise(make, rounds=6, split=3)


@pytest.mark.parametrize("name, key, value, text", [
    ("fedavgm", "momentum", 1.0, "must be >= 0 and < 1"),
    ("fedadam", "beta1", 1.0, "must be >= 0 and < 1"),
    ("fedyogi", "beta2", -0.1, "must be >= 0 and < 1"),
    ("fedadagrad", "tau", 0.0, "must be > 0"),
    ("fedams", "eps", 0.0, "must be > 0"),
    ("fedamsgrad", "learning_rate", -1.0, "must be > 0"),
    ("fedadam", "bias_correction", "yes", "expected a boolean"),
])
def test_bad_options_are_rejected_with_the_key_named(name, key, value, text):
    with pytest.raises(ConfigError, match=f"server.{key}.*{text}"):
        build_server(name, **{key: value})
