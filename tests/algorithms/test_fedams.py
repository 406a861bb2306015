"""FedAMS and FedAMSGrad (algorithms/fedams.py) against torch.optim.Adam(amsgrad=True) and a direct
transcription of Wang, Lin, Chen's algorithm."""
import pytest
import torch

from fedhet.algorithms.fedams import AMSOptions
from fedhet.core.options import ConfigError
from server_baseline_support import build_server
from server_optimizer_support import (
    DIM,
    X0,
    assert_sequences_close,
    check_empty_round_takes_no_step_and_keeps_the_optimizer_state,
    check_resumed_run_equals_uninterrupted_run,
    gradient_sequence,
    run_server,
    run_torch,
)


def test_fedamsgrad_with_bias_correction_is_torch_amsgrad():
    gradients = gradient_sequence(3)
    ours = run_server(build_server("fedamsgrad", learning_rate=0.1, beta1=0.9, beta2=0.99, eps=1e-3,
                                   bias_correction=True), X0, gradients)
    theirs = run_torch(torch.optim.Adam, X0, gradients, lr=0.1, betas=(0.9, 0.99), eps=1e-3, amsgrad=True)
    assert_sequences_close(ours, theirs)


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
    assert AMSOptions().bias_correction is False


@pytest.mark.parametrize("name", ["fedams", "fedamsgrad"])
def test_empty_round_takes_no_step_and_keeps_the_optimizer_state(name):
    check_empty_round_takes_no_step_and_keeps_the_optimizer_state(name)


@pytest.mark.parametrize("name", ["fedams", "fedamsgrad"])
def test_resumed_run_equals_uninterrupted_run(name):
    check_resumed_run_equals_uninterrupted_run(name, bias_correction=True)


@pytest.mark.parametrize("name, key, value, text", [
    ("fedams", "eps", 0.0, "must be > 0"),
    ("fedamsgrad", "learning_rate", -1.0, "must be > 0"),
])
def test_bad_options_are_rejected_with_the_key_named(name, key, value, text):
    with pytest.raises(ConfigError, match=f"server.{key}.*{text}"):
        build_server(name, **{key: value})
