"""The FedAU CNNs (Wang & Ji, "A Lightweight Method for Tackling Unknown Participation Statistics
in Federated Averaging", ICLR 2024), Appendix C.3 "Models" and the authors' ``model/cnn_*.py``.

All variants: two 3x3 convolutions with 32 filters (stride 1, padding 1), each followed by ReLU and
2x2 max-pooling (32x32 -> 16x16 -> 8x8, so 8*8*32 = 2048 features), then fully connected layers
with ReLU except the last. Per dataset (``variant``):

=========  ================================  ==========  =========================
variant    fully connected layers            dropout     parameters (3x32x32 input)
=========  ================================  ==========  =========================
svhn       2048 -> 128 -> 10                 none        273,706
cifar10    2048 -> 256 -> 64 -> 10           none        551,786
cifar100   2048 -> 512 -> 256 -> 100         0.2         1,216,260
cinic10    2048 -> 512 -> 256 -> 10          0.2         1,193,130
=========  ================================  ==========  =========================

The paper: "The model for the SVHN dataset has two fully connected layers, while the models for the
CIFAR-10/100 and CINIC-10 datasets have three fully connected layers ... For CIFAR-100 and CINIC-10
datasets, a dropout layer (with dropout probability p=0.2) is applied before each fully connected
layer." The hidden widths are the authors' code's. ``hidden`` and ``dropout`` override the variant.
The number of outputs is always ``num_classes``.

Dropout is an ``nn.Dropout`` module (active in ``train()`` mode only), present only when p > 0, so the
engine can find it by module type; under ``torch.func.vmap`` the caller must then pass
``randomness="different"`` (or ``"same"``) when training.

``init = "reference"`` is the paper's "Kaiming initialization" as the authors' code does it:
Kaiming-normal (fan_in, ReLU) weights and zero biases for the convolutions and the hidden fully
connected layers; the output layer keeps PyTorch's default. ``init = "pytorch"`` keeps PyTorch's
default everywhere.
"""
from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Optional, cast

import torch
import torch.nn.functional as F
from torch import nn

from fedhet.core.options import ConfigError, option
from fedhet.core.registry import MODELS
from fedhet.models.shapes import check_num_classes, check_spatial, image_shape

# variant -> (hidden widths of the fully connected layers, dropout probability); see the table above.
FEDAU_VARIANTS = MappingProxyType({
    "svhn": ((128,), 0.0),
    "cifar10": ((256, 64), 0.0),
    "cifar100": ((512, 256), 0.2),
    "cinic10": ((512, 256), 0.2),
})
CONV_CHANNELS = 32


@dataclasses.dataclass(frozen=True)
class FedAUCNNOptions:
    variant: str = option("cifar10", choices=tuple(FEDAU_VARIANTS),
                          help="which dataset's model from the FedAU paper (sets hidden and dropout)")
    hidden: Optional[tuple[int, ...]] = option(None, help="widths of the hidden fully connected layers, "
                                               "overriding the variant's (fc layers = len(hidden) + 1)")
    dropout: Optional[float] = option(None, ge=0.0, lt=1.0,
                                      help="dropout probability before each fully connected layer, "
                                      "overriding the variant's")
    init: str = option("reference", choices=("reference", "pytorch"),
                       help="weight initialisation: the paper's Kaiming init, or PyTorch's default")

    def validate(self, section: str) -> None:
        for i, width in enumerate(self.hidden or ()):
            if width < 1:
                raise ConfigError(f"{section}.hidden[{i}]", width, "must be an integer >= 1")

    def resolved(self) -> tuple[tuple[int, ...], float]:
        """``(hidden widths, dropout)`` after applying the overrides to the variant."""
        hidden, dropout = FEDAU_VARIANTS[self.variant]
        return (tuple(self.hidden) if self.hidden is not None else hidden,
                float(self.dropout) if self.dropout is not None else dropout)


class FedAUCNN(nn.Module):
    """Two conv3x3(32)-ReLU-maxpool blocks, then ``[dropout ->] Linear -> ReLU`` per hidden width,
    then ``[dropout ->] Linear`` to the logits."""

    def __init__(self, image: tuple[int, int, int], num_classes: int, hidden: tuple[int, ...],
                 dropout: float = 0.0, init: str = "reference"):
        super().__init__()
        channels, height, width = image
        self.image = image
        self.dropout = dropout
        # One parameter-free module reused before every fc layer; absent (Identity) when p == 0 so
        # the no-dropout variants draw no random numbers and need no vmap randomness argument.
        self.drop = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.conv1 = nn.Conv2d(channels, CONV_CHANNELS, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(CONV_CHANNELS, CONV_CHANNELS, kernel_size=3, padding=1)
        widths = [CONV_CHANNELS * (height // 4) * (width // 4), *hidden]
        self.hidden_layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.output = nn.Linear(widths[-1], num_classes)
        if init == "reference":
            self._reference_init()

    @torch.no_grad()
    def _reference_init(self) -> None:
        # cast: hidden_layers holds only nn.Linear (__init__), which ModuleList's type does not say.
        for layer in (self.conv1, self.conv2, *cast("list[nn.Linear]", list(self.hidden_layers))):
            nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
            if layer.bias is not None:      # always (bias=True); the test narrows the Optional type
                nn.init.zeros_(layer.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(x.shape[0], *self.image)
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = x.flatten(1)
        for layer in self.hidden_layers:
            x = F.relu(layer(self.drop(x)))
        return self.output(self.drop(x))


@MODELS.register("fedau_cnn", FedAUCNNOptions)
def make_fedau_cnn(options: FedAUCNNOptions, *, input_shape: tuple[int, ...], num_classes: int) -> FedAUCNN:
    """FedAU paper CNN: two 3x3 conv (32) + max-pool, 2 or 3 fc layers, dropout 0.2 for CIFAR-100/CINIC-10."""
    image = image_shape("fedau_cnn", input_shape)
    check_spatial("fedau_cnn", input_shape, image[1] // 4, image[2] // 4, "needs height and width >= 4")
    hidden, dropout = options.resolved()
    return FedAUCNN(image, check_num_classes("fedau_cnn", num_classes), hidden, dropout=dropout,
                    init=options.init)
