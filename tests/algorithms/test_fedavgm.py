"""FedAvgM (algorithms/fedavgm.py) against torch.optim.SGD with heavy-ball momentum, and FedAvg at beta = 0."""
import pytest
import torch

from fedhet.core.options import ConfigError
from fedhet.participation.uniform import UniformOptions, make_uniform
from server_baseline_support import build_server, problem, simulator
from server_optimizer_support import (
    X0,
    assert_sequences_close,
    check_empty_round_takes_no_step_and_keeps_the_optimizer_state,
    check_resumed_run_equals_uninterrupted_run,
    gradient_sequence,
    run_server,
    run_torch,
)


def test_fedavgm_is_torch_sgd_with_heavy_ball_momentum():
    gradients = gradient_sequence()
    ours = run_server(build_server("fedavgm", learning_rate=0.3, momentum=0.9), X0, gradients)
    theirs = run_torch(torch.optim.SGD, X0, gradients, lr=0.3, momentum=0.9, dampening=0.0)
    assert_sequences_close(ours, theirs)


def test_fedavgm_with_zero_momentum_is_fedavg_bit_for_bit():
    federation = problem(6)
    runs = {}
    for name, values in (("fedavg", {}), ("fedavgm", {"momentum": 0.0})):
        sim = simulator(federation, build_server(name, learning_rate=0.7, **values),
                        participation=make_uniform(UniformOptions(clients_per_round=3)), seed=4)
        runs[name] = sim.run(5)
    assert torch.equal(runs["fedavg"], runs["fedavgm"])


@pytest.mark.parametrize("name", ["fedavgm"])
def test_empty_round_takes_no_step_and_keeps_the_optimizer_state(name):
    check_empty_round_takes_no_step_and_keeps_the_optimizer_state(name)


@pytest.mark.parametrize("name", ["fedavgm"])
def test_resumed_run_equals_uninterrupted_run(name):
    check_resumed_run_equals_uninterrupted_run(name)


@pytest.mark.parametrize("name, key, value, text", [
    ("fedavgm", "momentum", 1.0, "must be >= 0 and < 1"),
])
def test_bad_options_are_rejected_with_the_key_named(name, key, value, text):
    with pytest.raises(ConfigError, match=f"server.{key}.*{text}"):
        build_server(name, **{key: value})
