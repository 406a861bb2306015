"""FedAdagrad, FedAdam, FedYogi (algorithms/adaptive.py) against torch.optim and a direct transcription
of Reddi et al.'s Algorithm 2."""
import pytest
import torch

from fedhet.algorithms.adaptive import AdaptiveOptions
from fedhet.core.options import ConfigError
from server_baseline_support import build_server
from server_optimizer_support import (
    X0,
    assert_sequences_close,
    check_empty_round_takes_no_step_and_keeps_the_optimizer_state,
    check_resumed_run_equals_uninterrupted_run,
    gradient_sequence,
    run_server,
    run_torch,
)


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


def test_bias_correction_is_off_by_default():
    assert AdaptiveOptions().bias_correction is False


@pytest.mark.parametrize("name", ["fedadagrad", "fedadam", "fedyogi"])
def test_empty_round_takes_no_step_and_keeps_the_optimizer_state(name):
    check_empty_round_takes_no_step_and_keeps_the_optimizer_state(name)


@pytest.mark.parametrize("name", ["fedadagrad", "fedadam", "fedyogi"])
def test_resumed_run_equals_uninterrupted_run(name):
    check_resumed_run_equals_uninterrupted_run(name, bias_correction=True)


@pytest.mark.parametrize("name, key, value, text", [
    ("fedadam", "beta1", 1.0, "must be >= 0 and < 1"),
    ("fedyogi", "beta2", -0.1, "must be >= 0 and < 1"),
    ("fedadagrad", "tau", 0.0, "must be > 0"),
    ("fedadam", "bias_correction", "yes", "expected a boolean"),
])
def test_bad_options_are_rejected_with_the_key_named(name, key, value, text):
    with pytest.raises(ConfigError, match=f"server.{key}.*{text}"):
        build_server(name, **{key: value})
