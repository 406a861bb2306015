"""SVHN (Street View House Numbers), cropped-digit format 2, from the official MATLAB files.

Format (http://ufldl.stanford.edu/housenumbers/): ``train_32x32.mat`` (73,257 digits),
``test_32x32.mat`` (26,032) and optionally ``extra_32x32.mat`` (531,131). Each holds ``X``, uint8
``[32, 32, 3, n]`` (height, width, RGB, image), and ``y``, ``[n, 1]`` with labels 1..10 where **10
means the digit 0**; here labels become 0..9 (digit value). Read with ``scipy.io.loadmat`` (the
optional ``formats`` extra).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from fedhet.core.dataset import DatasetBundle, TensorDataset
from fedhet.data.errors import DatasetFileError
from fedhet.data.transforms import normalize_uint8_images

# Channel statistics of the SVHN training set.
SVHN_MEAN = (0.4377, 0.4438, 0.4728)
SVHN_STD = (0.1980, 0.2010, 0.1970)

SVHN_OFFICIAL_URL = "http://ufldl.stanford.edu/housenumbers/"


def _loadmat():
    try:
        from scipy.io import loadmat
    except ImportError as error:
        raise ImportError("reading SVHN .mat files needs scipy: pip install fedhet[formats]") from error
    return loadmat


def read_svhn_mat(path: str | Path) -> tuple[torch.Tensor, torch.Tensor]:
    """One SVHN ``.mat`` file -> (uint8 images ``[n, 3, 32, 32]``, int64 digit labels 0..9)."""
    path = Path(path)
    if not path.is_file():
        raise DatasetFileError(f"{path}: missing; download it from {SVHN_OFFICIAL_URL} (cropped digits, format 2)")
    loadmat = _loadmat()
    try:
        contents = loadmat(str(path), variable_names=["X", "y"])
    except Exception as error:  # scipy raises ValueError, MatReadError, TypeError, ... on bad files
        raise DatasetFileError(f"{path}: not a readable MATLAB file ({type(error).__name__}: {error}); "
                               f"download it again from {SVHN_OFFICIAL_URL}") from error
    for key in ("X", "y"):
        if key not in contents:
            raise DatasetFileError(f"{path}: has no variable {key!r}; an SVHN file holds X [32, 32, 3, n] and y [n, 1]")
    images, labels = np.asarray(contents["X"]), np.asarray(contents["y"])
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[:3] != (32, 32, 3):
        raise DatasetFileError(f"{path}: X must be uint8 [32, 32, 3, n], found {images.dtype} {list(images.shape)}")
    count = images.shape[3]
    labels = labels.reshape(-1)
    if labels.shape[0] != count or not (np.issubdtype(labels.dtype, np.integer) or np.issubdtype(labels.dtype, np.floating)):
        raise DatasetFileError(f"{path}: y must hold {count} labels, found {labels.dtype} {list(labels.shape)}")
    if np.issubdtype(labels.dtype, np.floating) and not np.array_equal(labels, np.round(labels)):
        raise DatasetFileError(f"{path}: y must hold whole numbers 1..10, found fractional values")
    labels = labels.astype(np.int64)
    if count and (labels.min() < 1 or labels.max() > 10):
        raise DatasetFileError(f"{path}: y must be in 1..10 (10 = digit 0), found min {labels.min()} max {labels.max()}")
    labels = labels % 10  # label 10 is the digit 0
    # [H, W, C, n] -> [n, C, H, W]
    images_nchw = torch.from_numpy(np.ascontiguousarray(images.transpose(3, 2, 0, 1)))
    return images_nchw, torch.from_numpy(labels)


def load_svhn(root: str | Path, *, include_extra: bool = False) -> DatasetBundle:
    """SVHN: train (plus ``extra`` when ``include_extra``) and test images ``[n, 3, 32, 32]`` float32,
    normalised with :data:`SVHN_MEAN` / :data:`SVHN_STD`; int64 labels 0..9 (the digit).

    ``root`` is the directory holding ``train_32x32.mat`` and ``test_32x32.mat``
    (and ``extra_32x32.mat`` when ``include_extra``).
    """
    root = Path(root).expanduser()
    if not root.is_dir():
        raise DatasetFileError(f"{root}: not a directory; expected it to hold train_32x32.mat and test_32x32.mat "
                               f"from {SVHN_OFFICIAL_URL}")
    train_images, train_labels = read_svhn_mat(root / "train_32x32.mat")
    if include_extra:
        extra_images, extra_labels = read_svhn_mat(root / "extra_32x32.mat")
        train_images = torch.cat([train_images, extra_images])
        train_labels = torch.cat([train_labels, extra_labels])
    test_images, test_labels = read_svhn_mat(root / "test_32x32.mat")
    return DatasetBundle(
        name="svhn",
        train=TensorDataset(normalize_uint8_images(train_images, SVHN_MEAN, SVHN_STD), train_labels),
        test=TensorDataset(normalize_uint8_images(test_images, SVHN_MEAN, SVHN_STD), test_labels),
        num_classes=10,
        input_shape=(3, 32, 32),
        source_files=tuple(str(root / f"{split}_32x32.mat")
                           for split in ("train", *(("extra",) if include_extra else ()), "test")),
    )
