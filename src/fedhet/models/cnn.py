"""The FedAvg CNN for 28x28 images (MNIST, FEMNIST).

McMahan et al. (2017), Section 3: "a CNN with two 5x5 convolution layers (the first with 32
channels, the second with 64, each followed with 2x2 max pooling), a fully connected layer with 512
units and ReLu activation, and a final softmax output layer (1,663,370 total parameters)".
The convolutions use padding 2 ("same"), which is what gives 1,663,370 parameters for 1x28x28
inputs and 10 classes: 7*7*64 = 3136 features enter the 512-unit layer. Channels and spatial size
are taken from ``input_shape``; the fully connected input is ``64 * (H // 4) * (W // 4)``.
"""
from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from fedhet.core.options import ConfigError, option
from fedhet.core.registry import MODELS
from fedhet.models.shapes import check_num_classes, check_spatial, image_shape


@dataclasses.dataclass(frozen=True)
class FedAvgCNNOptions:
    conv_channels: tuple[int, ...] = option((32, 64), help="output channels of the two 5x5 convolutions")
    hidden: int = option(512, ge=1, help="units of the fully connected hidden layer")

    def validate(self, section: str) -> None:
        if len(self.conv_channels) != 2:
            raise ConfigError(f"{section}.conv_channels", list(self.conv_channels),
                              "expected exactly two channel counts (one per convolution)")
        for i, c in enumerate(self.conv_channels):
            if c < 1:
                raise ConfigError(f"{section}.conv_channels[{i}]", c, "must be an integer >= 1")


class FedAvgCNN(nn.Module):
    """conv5x5(pad 2) -> ReLU -> maxpool2 -> conv5x5(pad 2) -> ReLU -> maxpool2 -> fc -> ReLU -> fc."""

    def __init__(self, image: tuple[int, int, int], num_classes: int,
                 conv_channels: tuple[int, int] = (32, 64), hidden: int = 512):
        super().__init__()
        channels, height, width = image
        self.image = image
        self.conv1 = nn.Conv2d(channels, conv_channels[0], kernel_size=5, padding=2)
        self.conv2 = nn.Conv2d(conv_channels[0], conv_channels[1], kernel_size=5, padding=2)
        self.fc1 = nn.Linear(conv_channels[1] * (height // 4) * (width // 4), hidden)
        self.fc2 = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(x.shape[0], *self.image)
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


@MODELS.register("cnn", FedAvgCNNOptions)
def make_fedavg_cnn(options: FedAvgCNNOptions, *, input_shape: tuple[int, ...], num_classes: int) -> FedAvgCNN:
    """FedAvg CNN (McMahan et al. 2017): two 5x5 convs (32, 64) with max-pool, fc 512, fc out."""
    image = image_shape("cnn", input_shape)
    check_spatial("cnn", input_shape, image[1] // 4, image[2] // 4, "needs height and width >= 4")
    first, second = options.conv_channels             # two, by FedAvgCNNOptions.validate
    return FedAvgCNN(image, check_num_classes("cnn", num_classes), conv_channels=(first, second),
                     hidden=options.hidden)
