"""A model's forward FLOPs per example (fedhet.system.flops): a model's own count equals torch's counter."""
from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from fedhet.models.logreg import LogisticRegression
from fedhet.models.mlp import MLP
from fedhet.system.flops import forward_flops_per_example


def counted(model, example):
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(example)
    return float(counter.get_total_flops())


@pytest.mark.parametrize("model, shape", [
    (MLP(784, (200, 200), 10), (1, 1, 28, 28)),
    (MLP(60, (), 10), (1, 60)),
    (LogisticRegression(60, 10), (1, 60)),
    (LogisticRegression(12, 3, bias=False), (1, 3, 4)),
])
def test_a_model_s_own_count_is_the_counter_s(model, shape):
    example = torch.zeros(shape)
    assert model.forward_flops_per_example() == counted(model, example)
    assert forward_flops_per_example(model, example) == counted(model, example)


def test_a_model_without_its_own_count_is_counted():
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(6, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    model.train()
    assert forward_flops_per_example(model, torch.zeros(2, 2, 3)) == 2 * (6 * 4 + 4 * 2)
    assert model.training                     # put back as it was
