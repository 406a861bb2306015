"""The data side of a run: dataset, validation split, partition, per-client hold-out, model and task.

Every random choice is keyed by ``run.seed`` (``derive_seed(seed, "data" | "partition" |
"client_test" | "init")``), so the same config builds the same federation in every process: the
runner's, a sweep worker's, a Flower ServerApp's and each SuperNode's.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Optional

import torch

from fedhet.config.schema import ExperimentConfig
from fedhet.core.dataset import DatasetBundle, TensorDataset
from fedhet.core.registry import DATASETS, MODELS, PARTITIONERS
from fedhet.core.seeding import derive_seed
from fedhet.core.task import FederatedTask, build_task
from fedhet.data.validation import split_validation
from fedhet.engine import client_eval
from fedhet.models.shapes import check_model_reads_inputs

if TYPE_CHECKING:
    from fedhet.engine.dataset_cache import DatasetCache


@dataclasses.dataclass
class Federation:
    """The data side of a run: loaded dataset, partition, label counts, and the task on the device."""

    bundle: DatasetBundle
    partition: list[torch.Tensor]
    label_counts: torch.Tensor
    task: FederatedTask
    # Per client, the indices (into bundle.train) held out by data.client_test_fraction; None when 0.
    held_out: Optional[list[torch.Tensor]] = None
    validation: Optional[TensorDataset] = None     # data.validation_fraction's held-out training examples


def build_federation(config: ExperimentConfig, device: torch.device,
                     datasets: Optional[DatasetCache] = None) -> Federation:
    """The run's data side. ``datasets``: loaded datasets to reuse (a sweep worker's; see
    :mod:`fedhet.engine.dataset_cache`); the result is the same with or without it."""
    from fedhet.data.partition_report import label_counts as count_labels

    seed = config.run.seed
    data_entry = DATASETS.get(config.data.name, key="data.name")
    data_seed = derive_seed(seed, "data")
    bundle = (datasets.load(data_entry, config.data.options, data_seed) if datasets is not None
              else data_entry.factory(config.data.options, seed=data_seed))
    # Carved before partitioning, so no client trains on a validation example (data/validation.py).
    bundle, validation = split_validation(bundle, getattr(config.data.options, "validation_fraction", 0.0), seed)
    part_entry = PARTITIONERS.get(config.partition.name, key="partition.name")
    part_seed = config.partition.options.seed
    partition = part_entry.factory(config.partition.options, targets=bundle.train.targets,
                                   num_classes=bundle.num_classes,
                                   seed=derive_seed(seed, "partition") if part_seed is None else part_seed,
                                   natural=bundle.client_indices)
    held_out = None
    fraction = getattr(config.data.options, "client_test_fraction", 0.0)
    if fraction > 0:
        partition, held_out = client_eval.split_client_holdout(partition, fraction,
                                                               derive_seed(seed, "client_test"))
    counts = count_labels(partition, bundle.train.targets, bundle.num_classes)
    torch.manual_seed(derive_seed(seed, "init"))
    model = MODELS.get(config.model.name, key="model.name").factory(
        config.model.options, input_shape=bundle.input_shape, num_classes=bundle.num_classes)
    check_model_reads_inputs(config.model.name, model, bundle.train.inputs[:1])
    dtype = torch.float64 if config.run.dtype == "float64" else torch.float32
    task = build_task(model, bundle.train, bundle.test, partition, num_classes=bundle.num_classes,
                      device=device, dtype=dtype, train_transform=bundle.train_transform)
    if validation is not None:
        validation = TensorDataset(validation.inputs.to(device), validation.targets.to(device))
        if validation.inputs.is_floating_point():
            validation.inputs = validation.inputs.to(dtype)
    return Federation(bundle, partition, counts, task, held_out=held_out, validation=validation)
