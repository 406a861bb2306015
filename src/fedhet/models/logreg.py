"""Multinomial logistic regression: one linear layer from the flattened input to the logits.

The model of the Synthetic(alpha, beta) experiments (Shamir et al. 2014; Li et al. 2020, FedProx),
60 features -> 10 classes; with the cross-entropy loss of the client solver this is softmax
regression.
"""
from __future__ import annotations

import dataclasses

import torch
from torch import nn

from fedhet.core.options import option
from fedhet.core.registry import MODELS
from fedhet.models.shapes import check_num_classes, flat_features


@dataclasses.dataclass(frozen=True)
class LogRegOptions:
    bias: bool = option(True, help="learn an intercept per class")


class LogisticRegression(nn.Module):
    """``logits = W flatten(x) + b``."""

    def __init__(self, in_features: int, num_classes: int, bias: bool = True):
        super().__init__()
        self.linear = nn.Linear(in_features, num_classes, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x.reshape(x.shape[0], -1))

    def forward_flops_per_example(self) -> float:
        """The matrix product's FLOPs of one example's forward pass, ``2 * in * out`` (:mod:`fedhet.system.flops`)."""
        return float(2 * self.linear.in_features * self.linear.out_features)


@MODELS.register("logreg", LogRegOptions)
def make_logreg(options: LogRegOptions, *, input_shape: tuple[int, ...], num_classes: int) -> LogisticRegression:
    """Logistic regression (one linear layer), e.g. 60 -> 10 for Synthetic(alpha, beta)."""
    return LogisticRegression(flat_features("logreg", input_shape),
                              check_num_classes("logreg", num_classes), bias=options.bias)
