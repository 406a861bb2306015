"""``data.name = "hf"``: a Hugging Face dataset saved on disk (``DatasetDict.save_to_disk``).

What a Flower or FL-bench user already has: a dataset they loaded once with ``datasets`` (or
``flwr-datasets``) and saved with ``save_to_disk``. It is read with ``datasets.load_from_disk``,
which reads the local Arrow files and never downloads. ``datasets`` is an optional import (``pip
install fedhet[hf]``); without it the loader says so in one line.

The directory holds a ``DatasetDict`` with a training and a test split (``data.train_split``,
``data.test_split``). Columns:

- ``data.label`` (default ``label``) is the class: a ``ClassLabel`` gives the class count and ids; plain
  integers must be ``0 .. C-1`` (C = the largest plus one, over both splits); strings are mapped to ids
  in sorted order of the training split's values (a test label not seen in training is an error).
- ``data.input`` is the input column; unset, the one column left besides the label (and
  ``data.client_column``). Its kind decides the conversion:

  * images (an ``Image`` feature, or PIL images): decoded to ``[C, H, W]``, grey (``L``) or RGB as the
    first training image is, every image the same size; scaled to ``[0, 1]`` and normalised per channel
    by the training split's mean and standard deviation (computed here, so no constant is assumed);
  * text (strings): token ids ``[max_length]`` int64, by the built-in word tokenizer fitted on the
    training texts, or a local Hugging Face tokenizer directory (``data.tokenizer``), exactly as AG News
    (:mod:`fedhet.data.agnews`);
  * numbers (a number, or a fixed-length list or array of numbers): float32 features of that shape.

- ``data.client_column`` (optional) names a column that says which client holds each training row
  (e.g. FEMNIST's ``writer_id``): ``partition.name = "natural"`` then gives each distinct value (in
  sorted order) one client.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from fedhet.core.dataset import DatasetBundle, TensorDataset
from fedhet.core.options import ConfigError, option
from fedhet.core.registry import DATASETS
from fedhet.data.agnews import WordTokenizer, hugging_face_encoder
from fedhet.data.errors import DatasetFileError
from fedhet.data.hf_layout import saved_dataset_files
from fedhet.data.validation import DataOptions
from fedhet.errors import FedhetError

_INSTALL_HINT = "data.name = \"hf\" needs the datasets package: pip install fedhet[hf] (or pip install datasets)"


@dataclasses.dataclass(frozen=True)
class HfDiskOptions(DataOptions):
    path: Optional[str] = option(None, help="directory written by datasets' DatasetDict.save_to_disk (required; "
                                            "read locally, never downloaded)")
    train_split: str = option("train", help="split to train on")
    test_split: str = option("test", help="split to evaluate on")
    label: str = option("label", help="column holding the class (ClassLabel, integers 0..C-1, or strings)")
    input: Optional[str] = option(None, help="column holding the input (image, text or numbers); unset = the one "
                                             "column other than the label and data.client_column")
    client_column: Optional[str] = option(None, help="column naming each training row's client, for "
                                                     "partition.name = \"natural\"; unset = none")
    tokenizer: Optional[str] = option(None, help="text: local directory of a Hugging Face tokenizer (needs "
                                                 "fedhet[nlp]); unset = the built-in word tokenizer")
    vocab_size: int = option(30000, ge=1, help="text, built-in tokenizer: most frequent training words kept")
    max_length: int = option(128, ge=1, help="text: tokens per example (truncated or right-padded)")


class DatasetsNotInstalledError(FedhetError, ImportError):
    """``data.name = "hf"`` without the ``datasets`` package."""


def _import_datasets():
    try:
        import datasets
    except ImportError as error:
        raise DatasetsNotInstalledError(_INSTALL_HINT) from error
    return datasets


def _load_splits(options: HfDiskOptions):
    if options.path is None or not str(options.path).strip():
        raise ConfigError("data.path", options.path, "required: the directory a DatasetDict.save_to_disk wrote")
    directory = Path(options.path).expanduser()
    if not directory.is_dir():
        raise DatasetFileError(f"data.path = {directory}: no such directory (give the folder save_to_disk wrote)")
    # Before datasets opens anything: every file it will read must be a regular file inside the
    # directory (fedhet.data.hf_layout); these are the files data_files.json records.
    files = saved_dataset_files(directory)
    datasets = _import_datasets()
    try:
        loaded = datasets.load_from_disk(str(directory))
    except FileNotFoundError as error:
        raise DatasetFileError(f"{directory}: not a dataset saved with save_to_disk ({error})") from None
    except IndexError:
        # datasets fails this way on a split saved with no rows (no Arrow table to concatenate).
        raise DatasetFileError(f"{directory}: a split has no rows (datasets cannot load an empty split); the "
                               f"{options.train_split!r} and {options.test_split!r} splits need examples") from None
    except (ValueError, OSError, KeyError, TypeError) as error:
        # A damaged directory: a truncated or foreign Arrow file (pyarrow's ArrowInvalid is a
        # ValueError, ArrowIOError an OSError), a state.json or dataset_info.json that is not JSON.
        raise DatasetFileError(f"{directory}: a damaged save_to_disk directory ({type(error).__name__}: "
                               f"{str(error)[:300]}); save the dataset again") from None
    if not isinstance(loaded, datasets.DatasetDict):
        raise DatasetFileError(f"{directory}: holds one Dataset, not a DatasetDict with {options.train_split!r} and "
                               f"{options.test_split!r} splits; save DatasetDict({{'train': ..., 'test': ...}})")
    for key, split in (("data.train_split", options.train_split), ("data.test_split", options.test_split)):
        if split not in loaded:
            raise ConfigError(key, split, "no such split in the saved dataset; it has: "
                              + ", ".join(sorted(map(str, loaded))))
    return directory, files, loaded[options.train_split], loaded[options.test_split]


def _input_column(options: HfDiskOptions, columns: list[str]) -> str:
    for key, name in (("data.label", options.label), ("data.input", options.input),
                      ("data.client_column", options.client_column)):
        if name is not None and name not in columns:
            raise ConfigError(key, name, "no such column; the training split has: " + ", ".join(columns))
    if options.input is not None:
        return options.input
    rest = [c for c in columns if c not in (options.label, options.client_column)]
    if len(rest) != 1:
        raise ConfigError("data.input", None, f"name the input column: the training split has {len(rest)} columns "
                          f"besides the label ({', '.join(rest)})")
    return rest[0]


def _labels(train, test, column: str) -> tuple[torch.Tensor, torch.Tensor, int]:
    feature = train.features[column]
    train_values, test_values = list(train[column]), list(test[column])
    if hasattr(feature, "num_classes") and hasattr(feature, "names"):        # ClassLabel
        count = int(feature.num_classes)
        return (torch.tensor(train_values, dtype=torch.int64), torch.tensor(test_values, dtype=torch.int64), count)
    if all(isinstance(v, str) for v in train_values + test_values):
        names = sorted(set(train_values))
        ids = {name: index for index, name in enumerate(names)}
        unseen = sorted(set(test_values) - set(ids))
        if unseen:
            raise DatasetFileError(f"label column {column!r}: test labels not in the training split: {unseen[:5]}")
        return (torch.tensor([ids[v] for v in train_values], dtype=torch.int64),
                torch.tensor([ids[v] for v in test_values], dtype=torch.int64), len(names))
    if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in train_values + test_values):
        train_ids = torch.tensor(train_values, dtype=torch.int64)
        test_ids = torch.tensor(test_values, dtype=torch.int64)
        if min(train_ids.min(), test_ids.min()) < 0:
            raise DatasetFileError(f"label column {column!r}: negative class ids; expected 0 .. C-1")
        return train_ids, test_ids, int(max(train_ids.max(), test_ids.max())) + 1
    raise DatasetFileError(f"label column {column!r}: expected a ClassLabel, integers or strings")


def _is_image(feature: Any, first: Any) -> bool:
    return type(feature).__name__ == "Image" or (hasattr(first, "convert") and hasattr(first, "size"))


def _images(values: list, mode: str, size: tuple[int, int], column: str) -> torch.Tensor:
    arrays = []
    for index, image in enumerate(values):
        converted = image.convert(mode)
        if converted.size != size:
            raise DatasetFileError(f"image column {column!r}, row {index}: {converted.size[0]}x{converted.size[1]}, "
                                   f"expected {size[0]}x{size[1]} (every image must have the first one's size)")
        arrays.append(np.asarray(converted, dtype=np.uint8))
    stacked = torch.from_numpy(np.stack(arrays))
    return stacked.unsqueeze(1) if stacked.dim() == 3 else stacked.permute(0, 3, 1, 2)


def _image_inputs(train_values: list, test_values: list, column: str) -> tuple[torch.Tensor, torch.Tensor]:
    first = train_values[0]
    mode = "L" if first.mode in ("L", "1", "I", "F", "I;16") else "RGB"
    train = _images(train_values, mode, first.size, column).to(torch.float32) / 255
    test = _images(test_values, mode, first.size, column).to(torch.float32) / 255
    # Per-channel statistics of the training images (float64 sums: exact enough for 10^7 pixels).
    mean = train.to(torch.float64).mean(dim=(0, 2, 3))
    std = train.to(torch.float64).std(dim=(0, 2, 3)).clamp(min=1e-12)
    shape = (1, -1, 1, 1)
    return (((train - mean.view(shape)) / std.view(shape)).to(torch.float32),
            ((test - mean.view(shape)) / std.view(shape)).to(torch.float32))


def _text_inputs(train_values: list, test_values: list, options: HfDiskOptions) -> tuple[torch.Tensor, torch.Tensor]:
    if options.tokenizer is not None:
        encode = hugging_face_encoder(options.tokenizer, options.max_length)
        return encode(train_values), encode(test_values)
    tokenizer = WordTokenizer.fit(train_values, options.vocab_size)
    return tokenizer.encode(train_values, options.max_length), tokenizer.encode(test_values, options.max_length)


def _numeric_inputs(train_values: list, test_values: list, column: str) -> tuple[torch.Tensor, torch.Tensor]:
    try:
        train = torch.tensor(np.asarray(train_values, dtype=np.float32))
        test = torch.tensor(np.asarray(test_values, dtype=np.float32))
    except (ValueError, TypeError) as error:
        raise DatasetFileError(f"input column {column!r}: not an image, text or fixed-shape numbers "
                               f"({type(error).__name__}: {error})") from None
    if train.dim() == 1:
        train, test = train.unsqueeze(1), test.unsqueeze(1)
    if train.shape[1:] != test.shape[1:]:
        raise DatasetFileError(f"input column {column!r}: train rows have shape {tuple(train.shape[1:])}, test rows "
                               f"{tuple(test.shape[1:])}")
    if not (torch.isfinite(train).all() and torch.isfinite(test).all()):
        raise DatasetFileError(f"input column {column!r}: NaN or infinite values")
    return train, test


def _client_indices(train, column: str) -> list[torch.Tensor]:
    values = list(train[column])
    order = {value: index for index, value in enumerate(sorted(set(values), key=lambda v: (str(type(v)), v)))}
    owner = torch.tensor([order[v] for v in values], dtype=torch.int64)
    return [torch.nonzero(owner == client).flatten() for client in range(len(order))]


def load_hf_disk(options: HfDiskOptions) -> DatasetBundle:
    """The saved dataset of ``options.path`` as a :class:`DatasetBundle` (see the module docstring)."""
    directory, files, train, test = _load_splits(options)
    if len(train) == 0 or len(test) == 0:
        raise DatasetFileError(f"{directory}: the {options.train_split if len(train) == 0 else options.test_split} "
                               "split is empty")
    column = _input_column(options, list(train.column_names))
    train_labels, test_labels, num_classes = _labels(train, test, options.label)
    train_values, test_values = list(train[column]), list(test[column])
    if _is_image(train.features[column], train_values[0]):
        train_inputs, test_inputs = _image_inputs(train_values, test_values, column)
    elif isinstance(train_values[0], str):
        train_inputs, test_inputs = _text_inputs(train_values, test_values, options)
    else:
        train_inputs, test_inputs = _numeric_inputs(train_values, test_values, column)
    clients = _client_indices(train, options.client_column) if options.client_column else None
    return DatasetBundle(name="hf", train=TensorDataset(train_inputs, train_labels),
                         test=TensorDataset(test_inputs, test_labels), num_classes=num_classes,
                         input_shape=tuple(train_inputs.shape[1:]), client_indices=clients,
                         source_files=tuple(str(path) for path in files))


@DATASETS.register("hf", HfDiskOptions)
def make_hf_disk(options: HfDiskOptions, *, seed: int) -> DatasetBundle:
    """A Hugging Face DatasetDict saved with save_to_disk (image, text or numbers; never downloaded)."""
    return load_hf_disk(options)
