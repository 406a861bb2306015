"""The staleness functions of FedBuff/FedAsync and trace windows for the asynchronous loop (docs/async.md)."""
import math

import pytest
import torch

from fedhet.system.asynchronous import AsyncOptions, staleness_weight
from fedhet.system.availability import Availability


@pytest.mark.parametrize("options,expected", [
    (AsyncOptions(staleness="constant"), [1.0, 1.0, 1.0, 1.0]),
    (AsyncOptions(staleness="polynomial", staleness_a=0.5), [1.0, 2 ** -0.5, 3 ** -0.5, 4 ** -0.5]),
    (AsyncOptions(staleness="polynomial", staleness_a=0.0), [1.0, 1.0, 1.0, 1.0]),
    # FedAsync's hinge with a = 10, b = 1: 1 up to tau = 1, then 1 / (10 (tau - 1) + 1).
    (AsyncOptions(staleness="hinge", staleness_a=10.0, staleness_b=1.0), [1.0, 1.0, 1 / 11, 1 / 21]),
])
def test_staleness_weights_by_hand(options, expected):
    assert [staleness_weight(options, tau) for tau in range(4)] == pytest.approx(expected, rel=1e-15)


def test_negative_staleness_is_a_bug():
    with pytest.raises(ValueError):
        staleness_weight(AsyncOptions(), -1)


def trace(rows, periods):
    owner, start, end = zip(*rows)
    return Availability(torch.tensor(owner), torch.tensor(start, dtype=torch.float64),
                        torch.tensor(end, dtype=torch.float64), torch.tensor(periods, dtype=torch.float64))


def test_window_ends_with_and_without_a_period():
    # Client 0: [0, 5] every 6 s; client 1: [0, 1] and [2, inf); client 2: [4, 10] every 10 s, which
    # continues into [0, 1] of the next period (one window across the boundary); client 3 always on.
    availability = trace([(0, 0, 5), (1, 0, 1), (1, 2, math.inf), (2, 0, 1), (2, 4, 10), (3, 0, 10)],
                         [6, math.inf, 10, 10])
    assert availability.window_end(0, 3.0) == 5.0 and availability.window_end(0, 9.0) == 11.0
    assert availability.window_end(0, 5.5) is None
    assert availability.window_end(1, 0.5) == 1.0 and availability.window_end(1, 1.5) is None
    assert availability.window_end(1, 7.0) == math.inf
    assert availability.window_end(2, 5.0) == 11.0 and availability.window_end(2, 20.5) == 21.0
    assert availability.window_end(3, 123.0) == math.inf
    assert availability.on_later(1e9) and Availability.always(2).window_end(1, 7.0) == math.inf


def test_a_trace_that_ends_is_not_on_later():
    availability = trace([(0, 0, 5), (1, 2, 3)], [math.inf, math.inf])
    assert availability.on_later(4.0) and not availability.on_later(5.0)
