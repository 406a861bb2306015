"""FedAWARE's 5-layer CNN for CIFAR-10: three 3x3 convolutions and two fully connected layers.

The FedAWARE paper (AISTATS 2025, Section 6 "Settings") says only "5-layer CNN"; the architecture
is the authors' released ``ToyCifarNet`` (``model.py`` of the FedAWARE code):

    conv 3->32 3x3 (no padding) -> ReLU -> maxpool 2    32x32 -> 30x30 -> 15x15
    conv 32->64 3x3             -> ReLU -> maxpool 2    15x15 -> 13x13 -> 6x6
    conv 64->64 3x3             -> ReLU                  6x6  -> 4x4
    fc 64*4*4=1024 -> 64 -> ReLU -> fc 64 -> 10

which has 896 + 18,496 + 36,928 + 65,600 + 650 = 122,570 parameters for 3x32x32 inputs and 10
classes. The authors' CIFAR-100 variant (``ToyCifar100Net``) is the same with ``hidden = 256``.

Initialisation ``init = "reference"`` follows that code: Kaiming-normal (fan_out, ReLU) conv weights,
N(0, 0.01^2) linear weights, zero biases; ``init = "pytorch"`` keeps PyTorch's default.
"""
from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from fedhet.core.options import ConfigError, option
from fedhet.core.registry import MODELS
from fedhet.models.shapes import check_num_classes, check_spatial, image_shape

INIT_CHOICES = ("reference", "pytorch")


@dataclasses.dataclass(frozen=True)
class CNN5Options:
    conv_channels: tuple[int, ...] = option((32, 64, 64), help="output channels of the three 3x3 convolutions")
    hidden: int = option(64, ge=1, help="units of the fully connected hidden layer (256 in the "
                                        "authors' CIFAR-100 variant)")
    init: str = option("reference", choices=INIT_CHOICES,
                       help="weight initialisation: the FedAWARE code's, or PyTorch's default")

    def validate(self, section: str) -> None:
        if len(self.conv_channels) != 3:
            raise ConfigError(f"{section}.conv_channels", list(self.conv_channels),
                              "expected exactly three channel counts (one per convolution)")
        for i, c in enumerate(self.conv_channels):
            if c < 1:
                raise ConfigError(f"{section}.conv_channels[{i}]", c, "must be an integer >= 1")


def _feature_side(side: int) -> int:
    """Spatial size after conv3 -> pool2 -> conv3 -> pool2 -> conv3 (no padding)."""
    return ((side - 2) // 2 - 2) // 2 - 2


class CNN5(nn.Module):
    """The FedAWARE CIFAR CNN; see the module docstring for the layer table."""

    def __init__(self, image: tuple[int, int, int], num_classes: int,
                 conv_channels: tuple[int, int, int] = (32, 64, 64), hidden: int = 64,
                 init: str = "reference"):
        super().__init__()
        channels, height, width = image
        self.image = image
        self.conv1 = nn.Conv2d(channels, conv_channels[0], kernel_size=3)
        self.conv2 = nn.Conv2d(conv_channels[0], conv_channels[1], kernel_size=3)
        self.conv3 = nn.Conv2d(conv_channels[1], conv_channels[2], kernel_size=3)
        self.fc1 = nn.Linear(conv_channels[2] * _feature_side(height) * _feature_side(width), hidden)
        self.fc2 = nn.Linear(hidden, num_classes)
        if init == "reference":
            self._reference_init()

    @torch.no_grad()
    def _reference_init(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
                if module.bias is not None:     # always (bias=True); the test narrows the Optional type
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, 0.0, 0.01)
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(x.shape[0], *self.image)
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.conv3(x))
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


@MODELS.register("cnn5", CNN5Options)
def make_cnn5(options: CNN5Options, *, input_shape: tuple[int, ...], num_classes: int) -> CNN5:
    """FedAWARE 5-layer CIFAR CNN (3 conv + 2 fc; 122,570 parameters for CIFAR-10)."""
    image = image_shape("cnn5", input_shape)
    check_spatial("cnn5", input_shape, _feature_side(image[1]), _feature_side(image[2]),
                  "needs height and width >= 18")
    first, second, third = options.conv_channels      # three, by CNN5Options.validate
    return CNN5(image, check_num_classes("cnn5", num_classes), conv_channels=(first, second, third),
                hidden=options.hidden, init=options.init)
