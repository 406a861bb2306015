"""Dataset containers: whole datasets as tensors, gathered by index (no Dataset/DataLoader objects).

Loaders return a :class:`DatasetBundle`; the engine keeps ``inputs``/``targets`` resident on the
compute device and forms minibatches by index gather, which is the cheapest way to feed many small
clients (see docs/design.md, "Performance model").
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import torch

# A training-time augmentation applied per minibatch, freshly random each call:
# (inputs [B, ...], generator) -> augmented inputs [B, ...].
BatchTransform = Callable[[torch.Tensor, torch.Generator], torch.Tensor]


@dataclasses.dataclass
class TensorDataset:
    """Inputs and integer class targets as tensors of equal length."""

    inputs: torch.Tensor
    targets: torch.Tensor

    def __post_init__(self) -> None:
        if len(self.inputs) != len(self.targets):
            raise ValueError(f"inputs ({len(self.inputs)}) and targets ({len(self.targets)}) differ in length")

    def __len__(self) -> int:
        return len(self.targets)

    def to(self, device: torch.device | str) -> "TensorDataset":
        return TensorDataset(self.inputs.to(device), self.targets.to(device))

    def subset(self, indices: torch.Tensor) -> "TensorDataset":
        return TensorDataset(self.inputs[indices], self.targets[indices])


@dataclasses.dataclass
class DatasetBundle:
    """A loaded dataset, ready for partitioning.

    ``inputs`` are already normalised (float32 images, or int64 token ids for text).
    ``client_indices`` is set only for datasets with a natural partition (FEMNIST writers,
    Synthetic devices); the ``natural`` partitioner uses it.
    ``train_transform`` is the paper's training augmentation, applied per minibatch.
    """

    name: str
    train: TensorDataset
    test: TensorDataset
    num_classes: int
    input_shape: tuple[int, ...]
    client_indices: Optional[list[torch.Tensor]] = None
    train_transform: Optional[BatchTransform] = None
    # The files the data was read from, when the loader reports them (recorded in the run
    # directory's data_files.json with their sha256; None for generated data or loaders that do not).
    source_files: Optional[tuple[str, ...]] = None
