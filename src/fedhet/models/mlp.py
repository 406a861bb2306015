"""The FedAvg multilayer perceptron ("2NN") for MNIST-like data.

McMahan et al. (2017), "Communication-Efficient Learning of Deep Networks from Decentralized Data",
Section 3: "a simple multilayer-perceptron with 2-hidden layers with 200 units each using ReLu
activations (199,210 total parameters)", i.e. 784-200-200-10 for MNIST.
"""
from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from fedhet.core.options import ConfigError, option
from fedhet.core.registry import MODELS
from fedhet.models.shapes import check_num_classes, flat_features


@dataclasses.dataclass(frozen=True)
class MLPOptions:
    hidden: tuple[int, ...] = option((200, 200), help="widths of the hidden layers (ReLU after each); "
                                     "[] gives multinomial logistic regression")

    def validate(self, section: str) -> None:
        for i, width in enumerate(self.hidden):
            if width < 1:
                raise ConfigError(f"{section}.hidden[{i}]", width, "must be an integer >= 1")


class MLP(nn.Module):
    """Flatten, then ``Linear -> ReLU`` per hidden width, then a linear layer to the logits."""

    def __init__(self, in_features: int, hidden: tuple[int, ...], num_classes: int):
        super().__init__()
        widths = [in_features, *hidden]
        self.hidden_layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.output = nn.Linear(widths[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(x.shape[0], -1)
        for layer in self.hidden_layers:
            x = F.relu(layer(x))
        return self.output(x)

    def forward_flops_per_example(self) -> float:
        """The matrix products' FLOPs of one example's forward pass, ``2 * in * out`` per layer (what
        ``torch.utils.flop_counter`` counts, without importing it: :mod:`fedhet.system.flops`)."""
        return float(sum(2 * layer.in_features * layer.out_features for layer in [*self.hidden_layers, self.output]))


@MODELS.register("mlp", MLPOptions)
def make_mlp(options: MLPOptions, *, input_shape: tuple[int, ...], num_classes: int) -> MLP:
    """FedAvg MLP (McMahan et al. 2017): 784-200-200-10 with ReLU; flattens any input shape."""
    return MLP(flat_features("mlp", input_shape), tuple(options.hidden), check_num_classes("mlp", num_classes))
