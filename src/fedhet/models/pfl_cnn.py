"""pfl-research's ``simple_cnn``: the model of its CIFAR-10 benchmark (Granqvist et al. 2024).

pfl-research (arXiv:2404.06430) times its frameworks on CIFAR-10 with a small CNN of two 3x3
convolutions and one dense hidden layer (``benchmarks/model/pytorch/cnn.py`` of its code):

    conv 3->32 3x3 (no padding) -> ReLU                 32x32 -> 30x30
    conv 32->64 3x3             -> ReLU -> maxpool 2    30x30 -> 28x28 -> 14x14
    dropout 0.25 -> fc 64*14*14=12,544 -> 128 -> ReLU -> dropout 0.5 -> fc 128 -> 10

which has 896 + 18,496 + 1,605,760 + 1,290 = 1,626,442 parameters for 3x32x32 inputs and 10
classes, and about 34 MFLOP per example forward. Weights are Glorot-uniform and biases PyTorch's
default, as in that code. ``dropout = false`` leaves both dropout layers out: the model the
vectorised backend can train (docs/design.md, "Performance model": dropout masks under ``vmap`` cannot
match the sequential per-client stream), which ``benchmarks/bench_pfl_cifar.py`` times beside it.
"""
from __future__ import annotations

import dataclasses

import torch
from torch import nn

from fedhet.core.options import option
from fedhet.core.registry import MODELS
from fedhet.models.shapes import check_num_classes, check_spatial, image_shape


@dataclasses.dataclass(frozen=True)
class PflCNNOptions:
    dropout: bool = option(True, help="pfl-research's dropout layers (0.25 after the pooling, 0.5 after the "
                                      "hidden layer); false leaves them out (the vectorised backend's model)")
    hidden: int = option(128, ge=1, help="units of the dense hidden layer")


class PflCNN(nn.Module):
    """conv3x3 -> ReLU -> conv3x3 -> ReLU -> maxpool2 [-> dropout] -> fc -> ReLU [-> dropout] -> fc."""

    def __init__(self, image: tuple[int, int, int], num_classes: int, hidden: int = 128, dropout: bool = True):
        super().__init__()
        channels, height, width = image
        self.image = image
        pooled = ((height - 4) // 2, (width - 4) // 2)
        layers: list[nn.Module] = [nn.Conv2d(channels, 32, kernel_size=3), nn.ReLU(),
                                   nn.Conv2d(32, 64, kernel_size=3), nn.ReLU(), nn.MaxPool2d(2)]
        if dropout:
            layers.append(nn.Dropout(0.25))
        layers += [nn.Flatten(), nn.Linear(64 * pooled[0] * pooled[1], hidden), nn.ReLU()]
        if dropout:
            layers.append(nn.Dropout(0.5))
        layers.append(nn.Linear(hidden, num_classes))
        self.layers = nn.Sequential(*layers)
        for module in self.layers:
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                nn.init.xavier_uniform_(module.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x.reshape(x.shape[0], *self.image))


@MODELS.register("pfl_cnn", PflCNNOptions)
def make_pfl_cnn(options: PflCNNOptions, *, input_shape: tuple[int, ...], num_classes: int) -> PflCNN:
    """pfl-research's simple_cnn: two 3x3 convs (32, 64), max-pool, dense 128, dense out."""
    image = image_shape("pfl_cnn", input_shape)
    check_spatial("pfl_cnn", input_shape, (image[1] - 4) // 2, (image[2] - 4) // 2, "needs height and width >= 6")
    return PflCNN(image, check_num_classes("pfl_cnn", num_classes), hidden=options.hidden, dropout=options.dropout)
