"""The local learning-rate schedule: per-round exponential decay and FedAU's step schedule."""
import pytest

import fedhet.components  # noqa: F401
from fedhet.client.base import ClientOptions, local_learning_rate
from fedhet.config.schema import load_config
from fedhet.core.options import ConfigError
from fedhet.core.registry import CLIENT_SOLVERS, SERVERS
from fedhet.participation.full import FullOptions, make_full
from fedhet.problems.least_squares import make_least_squares
from fedhet.server.base import ServerOptions


def test_fedau_cifar100_step_schedule_halves_every_1000_rounds_from_round_10000():
    """Appendix C.4 of the FedAU paper, with rounds numbered from 1 as in the metrics."""
    options = ClientOptions(learning_rate=0.1, lr_step_start=10_000, lr_step_every=1000, lr_step_factor=0.5)
    expected = {1: 0.1, 9_999: 0.1, 10_000: 0.05, 10_999: 0.05, 11_000: 0.025, 20_000: 0.1 * 0.5 ** 11}
    for round_number, rate in expected.items():
        assert local_learning_rate(options, round_number - 1) == pytest.approx(rate, rel=1e-15)


def test_step_schedule_composes_with_exponential_decay_and_is_off_by_default():
    decayed = ClientOptions(learning_rate=0.2, lr_decay=0.9)
    assert [local_learning_rate(decayed, t) for t in range(3)] == pytest.approx([0.2, 0.18, 0.162], rel=1e-15)
    both = ClientOptions(learning_rate=0.2, lr_decay=0.9, lr_step_start=2, lr_step_every=2, lr_step_factor=0.1)
    assert [local_learning_rate(both, t) for t in range(4)] == pytest.approx(
        [0.2, 0.2 * 0.9 * 0.1, 0.2 * 0.9 ** 2 * 0.1, 0.2 * 0.9 ** 3 * 0.01], rel=1e-15)


def test_the_simulator_hands_the_scheduled_rate_to_the_clients():
    problem = make_least_squares(num_clients=2, dim=3, examples_per_client=8, seed=0)
    options = ClientOptions(learning_rate=0.1, batch_size=8, steps=1, lr_step_start=2, lr_step_every=1,
                            lr_step_factor=0.5)
    sim = problem.simulator(solver=CLIENT_SOLVERS.get("sgd").factory(options),
                            server=SERVERS.get("fedavg").factory(ServerOptions()),
                            participation=make_full(FullOptions()))
    rates = [sim.run_round()[0]["learning_rate"] for _ in range(3)]
    assert rates == pytest.approx([0.1, 0.05, 0.025], rel=1e-15)


@pytest.mark.parametrize("override, problem", [("client.lr_step_factor=0", "> 0"), ("client.lr_step_factor=2", "<= 1"),
                                               ("client.lr_step_every=0", ">= 1"), ("client.lr_step_start=-1", ">= 0")])
def test_impossible_schedules_are_refused_with_the_key(override, problem):
    with pytest.raises(ConfigError, match=problem) as caught:
        load_config(None, [override])
    assert override.split("=")[0] in str(caught.value)
