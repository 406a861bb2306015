"""ResNet-18 with GroupNorm in place of every BatchNorm.

He et al. (2016) ResNet-18 (BasicBlock, [2, 2, 2, 2], widths 64-128-256-512) with each
BatchNorm replaced by GroupNorm (Wu & He 2018), as Hsieh et al. (2020) recommend for federated
training: GroupNorm has no running statistics, so the model is its parameters alone and averaging
them is meaningful (and fedhet's flat-vector, functional training applies unchanged).

``stem``:
- ``"imagenet"``: 7x7 stride-2 convolution + 3x3 stride-2 max-pool, the torchvision layout used by
  FedSpeed (Sun et al., ICLR 2023: "the standard ResNet-18 backbone with the 7x7 filter size in the
  first convolution layer") and its predecessors (SCAFFOLD, FedDyn code);
- ``"cifar"``: 3x3 stride-1 convolution and no max-pool, the usual CIFAR variant (FedAWARE's code).

``groups`` is the GroupNorm group count in every normalisation layer. The default 2 is what the
FedDyn/FedSpeed code uses (``nn.GroupNorm(2, channels)``); the FedAWARE code uses 32. It must divide
64 (the narrowest layer).

The head is a global average pool and a linear layer, so any input size works (for 32x32 inputs
with the cifar stem this equals the common ``avg_pool2d(out, 4)``). Parameter count for 3x32x32
inputs and 10 classes: 11,173,962 (cifar stem), 11,181,642 (imagenet stem); GroupNorm has the same
2 * channels parameters as BatchNorm, so these equal torchvision's ResNet-18 with a 10-way head.

``init = "reference"`` is torchvision's ResNet initialisation (Kaiming-normal, fan_out, ReLU for
convolutions; normalisation weight 1, bias 0; PyTorch's default for the linear head), which the
FedDyn/FedSpeed code inherits; ``init = "pytorch"`` keeps PyTorch's default everywhere.
"""
from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from fedhet.core.options import ConfigError, option
from fedhet.core.registry import MODELS
from fedhet.models.shapes import check_num_classes, image_shape

STAGE_WIDTHS = (64, 128, 256, 512)
BLOCKS_PER_STAGE = (2, 2, 2, 2)


@dataclasses.dataclass(frozen=True)
class ResNet18GNOptions:
    groups: int = option(2, ge=1, help="GroupNorm groups in every normalisation layer (must divide 64)")
    stem: str = option("cifar", choices=("cifar", "imagenet"),
                       help="cifar: 3x3 stride-1 conv, no max-pool; imagenet: 7x7 stride-2 conv + "
                            "max-pool (FedSpeed)")
    init: str = option("reference", choices=("reference", "pytorch"),
                       help="weight initialisation: torchvision's ResNet init, or PyTorch's default")

    def validate(self, section: str) -> None:
        if STAGE_WIDTHS[0] % self.groups != 0:
            raise ConfigError(f"{section}.groups", self.groups,
                              "must divide 64 (the channel count of the narrowest layer): "
                              "1, 2, 4, 8, 16, 32 or 64")


class BasicBlockGN(nn.Module):
    """Two 3x3 convolutions with GroupNorm and a residual connection (1x1 conv + GN when the shape
    changes)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, groups: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.norm1 = nn.GroupNorm(groups, out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, stride=1, padding=1, bias=False)
        self.norm2 = nn.GroupNorm(groups, out_channels)
        self.shortcut = None
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                nn.GroupNorm(groups, out_channels),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        identity = x if self.shortcut is None else self.shortcut(x)
        return F.relu(out + identity)  # out of place: no in-place op on a tensor autograd/vmap needs


class ResNet18GN(nn.Module):
    """ResNet-18 with GroupNorm; see the module docstring."""

    def __init__(self, image: tuple[int, int, int], num_classes: int, groups: int = 2,
                 stem: str = "cifar", init: str = "reference"):
        super().__init__()
        self.image = image
        self.stem_maxpool = stem == "imagenet"
        if stem == "imagenet":
            self.conv1 = nn.Conv2d(image[0], STAGE_WIDTHS[0], 7, stride=2, padding=3, bias=False)
        else:
            self.conv1 = nn.Conv2d(image[0], STAGE_WIDTHS[0], 3, stride=1, padding=1, bias=False)
        self.norm1 = nn.GroupNorm(groups, STAGE_WIDTHS[0])
        stages = []
        in_channels = STAGE_WIDTHS[0]
        for index, (width, blocks) in enumerate(zip(STAGE_WIDTHS, BLOCKS_PER_STAGE)):
            first_stride = 1 if index == 0 else 2
            stage = []
            for block in range(blocks):
                stage.append(BasicBlockGN(in_channels, width, first_stride if block == 0 else 1, groups))
                in_channels = width
            stages.append(nn.Sequential(*stage))
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(STAGE_WIDTHS[-1], num_classes)
        if init == "reference":
            self._reference_init()

    @torch.no_grad()
    def _reference_init(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.GroupNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(x.shape[0], *self.image)
        x = F.relu(self.norm1(self.conv1(x)))
        if self.stem_maxpool:
            x = F.max_pool2d(x, kernel_size=3, stride=2, padding=1)
        x = self.stages(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


@MODELS.register("resnet18_gn", ResNet18GNOptions)
def make_resnet18_gn(options: ResNet18GNOptions, *, input_shape: tuple[int, ...], num_classes: int) -> ResNet18GN:
    """ResNet-18 with GroupNorm (default 2 groups); cifar (3x3) or imagenet (7x7 + max-pool) stem."""
    return ResNet18GN(image_shape("resnet18_gn", input_shape), check_num_classes("resnet18_gn", num_classes),
                      groups=options.groups, stem=options.stem, init=options.init)
