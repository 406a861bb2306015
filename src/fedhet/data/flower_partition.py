"""Flower Datasets' partitioners applied to fedhet's own tensors: ``partition.name = "flwr"``.

``partition.partitioner`` names a class of ``flwr_datasets.partitioner`` and ``partition.args`` its
keyword arguments. fedhet builds the training labels as an in-memory ``datasets.Dataset`` (columns
``label``, ``client_id`` when the dataset has a natural split, and an index column), and does what
``FederatedDataset`` does after its download: shuffle the split with ``seed`` (``shuffle_dataset``),
assign it to the partitioner and call ``load_partition(i)`` for every client. The index column gives
back each example's position in fedhet's training set. Nothing is read from the Hugging Face hub.

The seed: ``seed`` below is the partition seed the engine resolved (``partition.seed`` when set,
else ``derive_seed(run.seed, "partition")``); it is both ``FederatedDataset(seed=...)`` (the shuffle)
and the partitioner's own ``seed`` argument. Flower's default for both is 42, so
``partition.seed = 42`` gives the indices ``FederatedDataset(..., partitioners={"train": P})`` gives
for the same training set in the same order (docs/algorithms.md §8, "Flower's partitioners in fedhet").

``flwr_datasets`` (the extra ``pip install 'fedhet[flower]'``) is imported only when a config uses
this partitioner.
"""
from __future__ import annotations

import dataclasses
import difflib
import inspect
import typing
from typing import Any, Literal, Optional

import numpy as np
import torch

from fedhet.core.options import ConfigError, option
from fedhet.core.registry import PARTITIONERS
from fedhet.errors import FedhetError

INDEX_COLUMN = "__fedhet_index__"
LABEL_COLUMN = "label"
CLIENT_COLUMN = "client_id"

# Exported classes fedhet cannot use, and why.
_UNSUPPORTED = {
    "Partitioner": "the abstract base class",
    "IdToSizeFncPartitioner": "takes a Python function; use LinearPartitioner, SquarePartitioner or "
                              "ExponentialPartitioner",
    "VerticalEvenPartitioner": "splits features (columns), not examples",
    "VerticalSizePartitioner": "splits features (columns), not examples",
}
# Arguments fedhet sets itself, and which option to use instead.
_RESERVED = {"num_partitions": "partition.num_clients", "seed": "partition.seed"}


class FlowerPartitionError(FedhetError, ValueError):
    """A Flower partitioner refused fedhet's data, or gave a partition fedhet cannot train on."""


def _flwr_partitioner_module():
    try:
        import flwr_datasets.partitioner as module
    except ImportError:
        raise ConfigError("partition.name", "flwr", "needs the optional package flwr-datasets: "
                          "pip install 'fedhet[flower]'") from None
    return module


def supported_partitioners() -> dict[str, type]:
    """``{class name: class}`` of the row partitioners ``flwr_datasets.partitioner`` exports."""
    module = _flwr_partitioner_module()
    names = getattr(module, "__all__", dir(module))
    return {name: getattr(module, name) for name in sorted(names)
            if name not in _UNSUPPORTED and isinstance(getattr(module, name), type)
            and issubclass(getattr(module, name), module.Partitioner)}


def _parameters(cls: type) -> dict[str, inspect.Parameter]:
    params = dict(inspect.signature(cls.__init__).parameters)
    params.pop("self", None)
    return {name: p for name, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def _partitioner_class(name: str, section: str) -> type:
    classes = supported_partitioners()
    if name in classes:
        return classes[name]
    allowed = "allowed: " + ", ".join(classes)
    if name in _UNSUPPORTED:
        raise ConfigError(f"{section}.partitioner", name, f"{_UNSUPPORTED[name]}; {allowed}")
    close = difflib.get_close_matches(name, list(classes), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise ConfigError(f"{section}.partitioner", name, f"not a Flower Datasets partitioner; {hint}{allowed}")


def _check_args(cls: type, args: dict[str, Any], num_clients: Optional[int], section: str) -> None:
    params = _parameters(cls)
    allowed = [p for p in params if p not in _RESERVED]
    for key in args:
        if key in _RESERVED and key in params:
            raise ConfigError(f"{section}.args.{key}", args[key], f"set {_RESERVED[key]} instead")
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigError(f"{section}.args.{key}", args[key],
                              f"not an argument of {cls.__name__}{hint}; allowed: " + (", ".join(allowed) or "none"))
    for key, value in args.items():
        choices = typing.get_args(params[key].annotation) if typing.get_origin(params[key].annotation) is Literal else ()
        if choices and value not in choices:
            raise ConfigError(f"{section}.args.{key}", value, "allowed: " + ", ".join(repr(c) for c in choices))
    missing = [p for p in allowed if params[p].default is inspect.Parameter.empty
               and p not in args and p != "partition_by"]
    if missing:
        raise ConfigError(f"{section}.args", args, f"{cls.__name__} requires " + ", ".join(missing))
    if "num_partitions" in params and num_clients is None:
        raise ConfigError(f"{section}.num_clients", None, f"required by {cls.__name__} (its num_partitions)")
    by = args.get("partition_by", LABEL_COLUMN)
    if "partition_by" in params and by not in (LABEL_COLUMN, CLIENT_COLUMN):
        raise ConfigError(f"{section}.args.partition_by", by, f"allowed: {LABEL_COLUMN!r} (the class labels) or "
                          f"{CLIENT_COLUMN!r} (the dataset's natural clients)")


def _keyword_arguments(cls: type, args: dict[str, Any], num_clients: Optional[int], seed: int) -> dict[str, Any]:
    """The constructor's keyword arguments: ``args`` plus what fedhet sets (see the module docstring)."""
    params = _parameters(cls)
    kwargs = dict(args)
    for name, value in args.items():
        text = str(params[name].annotation)
        # TOML gives lists; an argument typed as an array only (DistributionPartitioner's
        # distribution_array) gets a NumPy array.
        if isinstance(value, list) and "ndarray" in text.lower() and "list" not in text.lower():
            kwargs[name] = np.asarray(value)
    if "partition_by" in params:
        kwargs.setdefault("partition_by", LABEL_COLUMN)
    if "num_partitions" in params:
        kwargs["num_partitions"] = num_clients
    if "seed" in params:
        kwargs["seed"] = seed
    return kwargs


def _construct(cls: type, kwargs: dict[str, Any], args: dict[str, Any]) -> Any:
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as error:
        raise ConfigError("partition.args", args, f"{cls.__name__} refused it: {error}") from None


@dataclasses.dataclass(frozen=True)
class FlowerOptions:
    """A Flower Datasets partitioner applied to fedhet's training labels."""

    partitioner: str = option(help="Flower Datasets partitioner class (flwr_datasets.partitioner), e.g. "
                                   "\"DirichletPartitioner\"; needs pip install 'fedhet[flower]'")
    num_clients: Optional[int] = option(None, help="number of clients N, passed as the partitioner's "
                                                   "num_partitions (required by those that take it); for the others "
                                                   "none, or the number of partitions they make", symbol="N", ge=1)
    seed: Optional[int] = option(None, help="the shuffle's and the partitioner's seed (Flower's default is 42); "
                                            "none derives it from run.seed")
    shuffle_dataset: bool = option(True, help="shuffle the training set with the seed before partitioning, as "
                                              "FederatedDataset(shuffle=True) does")
    args: dict[str, Any] = option(default_factory=dict, help="the partitioner's other keyword arguments, e.g. "
                                                             "{alpha = 0.5}; partition_by defaults to \"label\" "
                                                             "(\"client_id\": the dataset's natural clients); "
                                                             "num_partitions and seed come from num_clients and seed")

    def validate(self, section: str) -> None:
        cls = _partitioner_class(self.partitioner, section)
        _check_args(cls, self.args, self.num_clients, section)
        # Flower's constructors check their arguments' values: catch a bad one before any data loads.
        _construct(cls, _keyword_arguments(cls, self.args, self.num_clients, 0), self.args)


def _client_column(natural: Optional[list[torch.Tensor]], num_examples: int) -> np.ndarray:
    if natural is None:
        raise ConfigError("partition.args.partition_by", CLIENT_COLUMN, "this dataset has no natural clients; "
                          f"use {LABEL_COLUMN!r}")
    owner = np.full(num_examples, -1, dtype=np.int64)
    for client, part in enumerate(natural):
        owner[torch.as_tensor(part, dtype=torch.int64).numpy()] = client
    if (owner < 0).any():
        raise FlowerPartitionError(f"partition_by = {CLIENT_COLUMN!r}: {int((owner < 0).sum())} training examples "
                                   "belong to no natural client")
    return owner


def flower_partition(options: FlowerOptions, labels: np.ndarray, seed: int,
                     natural: Optional[list[torch.Tensor]] = None) -> list[torch.Tensor]:
    """Per-client sorted index tensors from the Flower partitioner ``options`` describes (module docstring)."""
    import datasets

    cls = _partitioner_class(options.partitioner, "partition")
    kwargs = _keyword_arguments(cls, options.args, options.num_clients, seed)
    columns: dict[str, Any] = {LABEL_COLUMN: labels, INDEX_COLUMN: np.arange(len(labels), dtype=np.int64)}
    if kwargs.get("partition_by") == CLIENT_COLUMN:
        columns[CLIENT_COLUMN] = _client_column(natural, len(labels))
    dataset = datasets.Dataset.from_dict(columns)
    if options.shuffle_dataset:
        dataset = dataset.shuffle(seed=seed)      # FederatedDataset._prepare_dataset
    partitioner = _construct(cls, kwargs, options.args)
    partitioner.dataset = dataset
    try:
        count = partitioner.num_partitions
        parts = [np.sort(np.asarray(partitioner.load_partition(i).with_format("numpy")[INDEX_COLUMN], dtype=np.int64))
                 for i in range(count)]
    except (ValueError, KeyError, IndexError, ZeroDivisionError) as error:
        # ZeroDivisionError: ShardPartitioner with more shards than examples, the user's error.
        raise FlowerPartitionError(f"{cls.__name__} could not partition the {len(labels)} training examples: "
                                   f"{error}") from None
    return _checked(parts, cls.__name__, options.num_clients)


def _checked(parts: list[np.ndarray], name: str, num_clients: Optional[int]) -> list[torch.Tensor]:
    if num_clients is not None and len(parts) != num_clients:
        raise ConfigError("partition.num_clients", num_clients, f"{name} made {len(parts)} partitions; leave "
                          f"num_clients unset or set it to {len(parts)}")
    empty = [i for i, part in enumerate(parts) if len(part) == 0]
    if empty:
        raise FlowerPartitionError(f"{name} left clients {empty[:10]} without examples; fedhet needs every client "
                                   "to hold at least one")
    every = np.concatenate(parts)
    if len(np.unique(every)) != len(every):
        raise FlowerPartitionError(f"{name} gave some examples to several clients; fedhet needs disjoint partitions")
    return [torch.from_numpy(part) for part in parts]


@PARTITIONERS.register("flwr", FlowerOptions)
def make_flower_partition(options: FlowerOptions, *, targets: torch.Tensor, num_classes: int, seed: int,
                          natural: Optional[list[torch.Tensor]] = None) -> list[torch.Tensor]:
    """A Flower Datasets partitioner (flwr_datasets.partitioner) on fedhet's own labels, no hub access."""
    from fedhet.data.partition import checked_labels

    labels = checked_labels(targets, num_classes)
    return flower_partition(options, labels, options.seed if options.seed is not None else seed, natural)
