"""FEMNIST from LEAF's JSON files, with its natural partition: one client per writer.

Format (LEAF, Caldas et al. 2018, https://github.com/TalwalkarLab/leaf, ``data/femnist``;
``./preprocess.sh`` writes ``data/femnist/data/train/*.json`` and ``test/*.json``): each file is
``{"users": [id, ...], "num_samples": [m, ...], "user_data": {id: {"x": [[784 floats], ...],
"y": [int, ...]}}}``. ``x`` rows are 28 x 28 images flattened row-major with pixels in [0, 1] where
**1.0 is the white background and the ink is dark**; ``y`` is one of 62 classes (digits 0-9,
upper-case A-Z = 10..35, lower-case a-z = 36..61).

Pixels are kept as LEAF ships them (the input LEAF's reference CNN is trained on): no mean/std
standardisation and, by default, no inversion; ``invert=True`` gives ``1 - x`` (white ink on a
black background, MNIST's convention).

Writer order (the client order of :attr:`DatasetBundle.client_indices`) is the sorted writer id,
so it does not depend on how LEAF split the writers into files; writers without training samples
are left out. Test examples of all writers are pooled into one test set.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from fedhet.core.dataset import DatasetBundle, TensorDataset
from fedhet.data.errors import DatasetFileError

FEMNIST_NUM_CLASSES = 62
FEMNIST_SOURCE = "LEAF (https://github.com/TalwalkarLab/leaf): run data/femnist/preprocess.sh"
_PIXELS = 28 * 28


def _user_arrays(path: Path, user: str, record: object, expected: int) -> tuple[np.ndarray, np.ndarray]:
    where = f"{path}: user_data[{user!r}]"
    if not isinstance(record, dict) or "x" not in record or "y" not in record:
        raise DatasetFileError(f"{where} must be an object with 'x' and 'y'")
    try:
        images = np.asarray(record["x"], dtype=np.float32)
        labels = np.asarray(record["y"])
    except (ValueError, TypeError) as error:  # ragged rows or non-numbers
        raise DatasetFileError(f"{where}: 'x' must be a list of {_PIXELS}-number rows ({error})") from error
    if images.ndim != 2 or images.shape[1] != _PIXELS:
        if not (images.size == 0 and labels.size == 0):
            raise DatasetFileError(f"{where}: 'x' must be [m, {_PIXELS}], found {list(images.shape)}")
        images = images.reshape(0, _PIXELS)
    if labels.size and not (labels.ndim == 1 and np.issubdtype(labels.dtype, np.integer)):
        raise DatasetFileError(f"{where}: 'y' must be a list of integers")
    labels = labels.astype(np.int64).reshape(-1)
    if not (len(images) == len(labels) == expected):
        raise DatasetFileError(f"{where}: num_samples says {expected}, found {len(images)} x rows and {len(labels)} y")
    if labels.size and (labels.min() < 0 or labels.max() >= FEMNIST_NUM_CLASSES):
        raise DatasetFileError(f"{where}: 'y' must be in 0..{FEMNIST_NUM_CLASSES - 1}, "
                               f"found min {labels.min()} max {labels.max()}")
    if images.size and (not np.isfinite(images).all() or images.min() < 0.0 or images.max() > 1.0):
        raise DatasetFileError(f"{where}: pixels must lie in [0, 1] as LEAF writes them")
    return images, labels


def read_leaf_json(path: str | Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """One LEAF JSON file -> ``{user: (float32 pixels [m, 784], int64 labels [m])}``, validated."""
    path = Path(path)
    try:
        with path.open(encoding="utf-8") as handle:
            content = json.load(handle)
    except (ValueError, UnicodeDecodeError) as error:  # JSONDecodeError is a ValueError
        raise DatasetFileError(f"{path}: not a readable JSON file ({type(error).__name__}: {error})") from error
    if not isinstance(content, dict):
        raise DatasetFileError(f"{path}: expected a JSON object with users, num_samples and user_data")
    for key in ("users", "num_samples", "user_data"):
        if key not in content:
            raise DatasetFileError(f"{path}: missing key {key!r}; a LEAF file has users, num_samples and user_data")
    users, counts, data = content["users"], content["num_samples"], content["user_data"]
    if not isinstance(users, list) or not isinstance(counts, list) or len(users) != len(counts):
        raise DatasetFileError(f"{path}: 'users' and 'num_samples' must be lists of equal length")
    if not isinstance(data, dict):
        raise DatasetFileError(f"{path}: 'user_data' must be an object keyed by user id")
    if not all(isinstance(count, int) and not isinstance(count, bool) and count >= 0 for count in counts):
        raise DatasetFileError(f"{path}: 'num_samples' must be non-negative integers")
    out = {}
    for user, count in zip(users, counts):
        if user not in data:
            raise DatasetFileError(f"{path}: user {user!r} is listed in 'users' but has no 'user_data'")
        out[str(user)] = _user_arrays(path, user, data[user], count)
    return out


def _read_split(directory: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    files = sorted(directory.glob("*.json"))
    if not files:
        raise DatasetFileError(f"{directory}: no *.json files; expected LEAF's output from {FEMNIST_SOURCE}")
    users: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    origin: dict[str, Path] = {}
    for path in files:
        for user, arrays in read_leaf_json(path).items():
            if user in users:
                raise DatasetFileError(f"{path}: user {user!r} also appears in {origin[user]}; "
                                       "each writer must be in one file per split")
            users[user], origin[user] = arrays, path
    return users


def _femnist_dir(root: Path) -> Path:
    for candidate in (root, root / "data"):
        if (candidate / "train").is_dir() and (candidate / "test").is_dir():
            return candidate
    raise DatasetFileError(f"{root}: no FEMNIST train/ and test/ folders; expected {root}/train/*.json and "
                           f"{root}/test/*.json (LEAF's data/femnist/data) from {FEMNIST_SOURCE}")


def _to_images(pixels: np.ndarray, invert: bool) -> torch.Tensor:
    images = torch.from_numpy(pixels).view(-1, 1, 28, 28)
    return 1.0 - images if invert else images


def load_femnist(root: str | Path, *, invert: bool = False) -> DatasetBundle:
    """FEMNIST: float32 images ``[n, 1, 28, 28]`` in [0, 1], int64 labels 0..61, and
    ``client_indices``: one int64 tensor of train indices per writer, writers in sorted id order.

    ``root`` is LEAF's ``data/femnist/data`` (holding ``train/`` and ``test/``) or its parent.
    """
    base = _femnist_dir(Path(root).expanduser())
    train_users = _read_split(base / "train")
    test_users = _read_split(base / "test")
    writers = [user for user in sorted(train_users) if len(train_users[user][1]) > 0]
    if not writers:
        raise DatasetFileError(f"{base / 'train'}: no writer has training samples")
    client_indices, start = [], 0
    for user in writers:
        count = len(train_users[user][1])
        client_indices.append(torch.arange(start, start + count, dtype=torch.int64))
        start += count
    train_pixels = np.concatenate([train_users[user][0] for user in writers])
    train_labels = np.concatenate([train_users[user][1] for user in writers])
    test_order = sorted(test_users)
    test_pixels = np.concatenate([test_users[user][0] for user in test_order])
    test_labels = np.concatenate([test_users[user][1] for user in test_order])
    return DatasetBundle(
        name="femnist",
        train=TensorDataset(_to_images(train_pixels, invert), torch.from_numpy(train_labels)),
        test=TensorDataset(_to_images(test_pixels, invert), torch.from_numpy(test_labels)),
        num_classes=FEMNIST_NUM_CLASSES,
        input_shape=(1, 28, 28),
        client_indices=client_indices,
        # The same sorted glob _read_split read.
        source_files=tuple(str(p) for split in ("train", "test") for p in sorted((base / split).glob("*.json"))),
    )
