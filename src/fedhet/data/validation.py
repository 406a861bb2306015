"""A validation split carved from the training data, for choosing settings without the test set.

``data.validation_fraction = f`` (an option every dataset has, :class:`DataOptions`) takes
``round(f n)`` training examples out of the training set *before* partitioning:

- the examples are chosen uniformly at random without replacement by a generator keyed by the
  run seed (stream ``"validation"``), so the same seed gives the same split, whatever the partition;
- they are removed from the training set, so no client ever trains on them; the partitioner sees
  only the remaining examples (in their original order);
- for a dataset with natural clients (Synthetic devices, FEMNIST writers) each client keeps its
  remaining examples, re-indexed into the reduced training set; a client left with none is an error
  at task build time, as an empty client always is.

The runner evaluates the split beside the test set at every evaluation round and records
``val_loss`` and ``val_accuracy`` (docs/tuning.md). ``0`` (the default) carves nothing.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from fedhet.core.dataset import DatasetBundle, TensorDataset
from fedhet.core.options import option
from fedhet.core.seeding import torch_generator


@dataclasses.dataclass(frozen=True)
class DataOptions:
    """Options every dataset has (base class of the datasets' option dataclasses): the two seeded
    slices a run can take out of the training data, for choosing settings (``validation_fraction``)
    and for per-client evaluation (``client_test_fraction``, :mod:`fedhet.engine.client_eval`)."""

    validation_fraction: float = option(
        0.0, ge=0, lt=1,
        help="fraction of the training examples held out (seeded, before partitioning) as a validation "
             "split, evaluated beside the test set as val_loss / val_accuracy; 0 = none")
    client_test_fraction: float = option(
        0.0, ge=0, lt=1,
        help="fraction of each client's partition held out (seeded by run.seed) for per-client evaluation and "
             "removed from its training data; at least one example per client when > 0; 0 (default): off")


def validation_indices(num_examples: int, fraction: float, seed: int) -> torch.Tensor:
    """Sorted int64 indices of the ``round(fraction * num_examples)`` held-out training examples."""
    count = int(round(fraction * num_examples))
    if count == 0:
        return torch.zeros(0, dtype=torch.int64)
    if count >= num_examples:
        raise ValueError(f"data.validation_fraction = {fraction} leaves no training example "
                         f"(of {num_examples}); allowed: a fraction that keeps at least one")
    order = torch.randperm(num_examples, generator=torch_generator(seed, "validation"))
    return torch.sort(order[:count]).values


def split_validation(bundle: DatasetBundle, fraction: float,
                     seed: int) -> tuple[DatasetBundle, Optional[TensorDataset]]:
    """``(bundle without the validation examples, validation set)``; ``(bundle, None)`` for ``0``."""
    held_out = validation_indices(len(bundle.train), fraction, seed)
    if held_out.numel() == 0:
        return bundle, None
    keep = torch.ones(len(bundle.train), dtype=torch.bool)
    keep[held_out] = False
    kept = torch.nonzero(keep).flatten()
    clients = None
    if bundle.client_indices is not None:
        # New position of each kept example in the reduced training set (-1 for held-out ones).
        position = torch.full((len(bundle.train),), -1, dtype=torch.int64)
        position[kept] = torch.arange(kept.numel(), dtype=torch.int64)
        clients = [position[torch.as_tensor(idx, dtype=torch.int64)] for idx in bundle.client_indices]
        clients = [idx[idx >= 0] for idx in clients]
    reduced = dataclasses.replace(bundle, train=bundle.train.subset(kept), client_indices=clients)
    return reduced, bundle.train.subset(held_out)
