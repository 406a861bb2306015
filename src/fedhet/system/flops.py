"""The model's forward FLOPs per example, counted by PyTorch (``torch.utils.flop_counter``).

``FlopCounterMode`` counts the floating-point operations of the matrix products and convolutions
of one forward pass (2 per multiply-add); elementwise operations are not counted, which for the
models fedhet trains is a small fraction. One example is pushed through the model in ``eval`` mode
under ``no_grad``; the model's parameters are not changed. A model that states its own count (a
``forward_flops_per_example()`` method, as fedhet's MLP and logistic regression do: the same number,
tested against the counter) is not run: the counter's import costs seconds of CPU at every clock
run's start.
"""
from __future__ import annotations

import torch


def forward_flops_per_example(model: torch.nn.Module, example: torch.Tensor) -> float:
    """Forward FLOPs of ``model`` on ``example`` (a batch of one, ``[1, ...]``)."""
    stated = getattr(model, "forward_flops_per_example", None)
    count = stated() if callable(stated) else None
    if isinstance(count, (int, float)):
        return float(count)
    from torch.utils.flop_counter import FlopCounterMode

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(example)
    finally:
        model.train(was_training)
    return float(counter.get_total_flops()) / max(1, int(example.shape[0]))
