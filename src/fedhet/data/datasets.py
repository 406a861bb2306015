"""Registered datasets of this module: "fmnist", "mnist" (IDX files) and "synthetic" (generated).

Image datasets are found in this order (:func:`locate_idx_files`):

1. ``data.root``, when set, and then only there (a ``data.root`` that does not hold the files is an
   error, never a silent fallback to the other places);
2. the system directory (``/usr/share/datasets/fashion-mnist/``, where
   ``apt-get install dataset-fashion-mnist`` puts the files; ``/usr/share/datasets/mnist/``);
3. the cache directory ``data.cache_dir`` (default ``~/.cache/fedhet/<fashion-mnist|mnist>``),
   downloading the missing files there from the official mirror when ``data.download`` is true.

Images become float32 ``[n, 1, 28, 28]``: ``(x / 255 - mean) / std`` with the usual per-dataset
constants (Fashion-MNIST 0.2860 / 0.3530, MNIST 0.1307 / 0.3081, the training-set pixel mean and
standard deviation); targets are int64 ``0..9``.

Checksums: downloads are verified against the md5 of the official ``.gz`` files. The Debian
package re-compresses the files (its ``.gz`` bytes differ: ``gzip -l`` shows a 2020 timestamp), but
their uncompressed contents match the published md5s in :attr:`IdxSource.content_md5`, which
:func:`verify_idx_content` checks.
"""
from __future__ import annotations

import dataclasses
import gzip
import hashlib
import os
from pathlib import Path
from typing import Iterable, Optional

from fedhet.core.dataset import DatasetBundle, TensorDataset
from fedhet.core.options import option
from fedhet.core.registry import DATASETS
from fedhet.data.download import DownloadError, download_file
from fedhet.data.idx import (
    IDX_FILE_STEMS,
    SYSTEM_DATA_DIRS,
    DatasetNotFoundError,
    IdxFiles,
    find_idx_files,
    idx_files_in,
    read_idx_split,
)
from fedhet.data.synthetic import make_synthetic
from fedhet.data.transforms import normalize_uint8_images
from fedhet.data.validation import DataOptions


@dataclasses.dataclass(frozen=True)
class IdxSource:
    """Where an MNIST-like dataset comes from and how to normalise it."""

    name: str                         # directory name: system dir and cache subdirectory
    base_url: str                     # the four "<stem>.gz" files live under this URL
    gz_md5: dict[str, str]            # stem -> md5 of the official .gz file
    content_md5: dict[str, str]       # stem -> md5 of the uncompressed IDX file
    mean: float
    std: float
    apt_package: Optional[str] = None  # Debian package that installs the files, if any


IDX_SOURCES: dict[str, IdxSource] = {
    # https://github.com/zalandoresearch/fashion-mnist#get-the-data
    "fmnist": IdxSource(
        name="fashion-mnist",
        base_url="http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
        gz_md5={"train-images-idx3-ubyte": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
                "train-labels-idx1-ubyte": "25c81989df183df01b3e8a0aad5dffbe",
                "t10k-images-idx3-ubyte": "bef4ecab320f06d8554ea6380940ec79",
                "t10k-labels-idx1-ubyte": "bb300cfdad3c16e7a12a480ee83cd310"},
        content_md5={"train-images-idx3-ubyte": "f4a8712d7a061bf5bd6d2ca38dc4d50a",
                     "train-labels-idx1-ubyte": "9018921c3c673c538a1fc5bad174d6f9",
                     "t10k-images-idx3-ubyte": "8181f5470baa50b63fa0f6fddb340f0a",
                     "t10k-labels-idx1-ubyte": "15d484375f8d13e6eb1aabb0c3f46965"},
        mean=0.2860, std=0.3530, apt_package="dataset-fashion-mnist"),
    # The PyTorch mirror of http://yann.lecun.com/exdb/mnist/ (the original site refuses scripts).
    "mnist": IdxSource(
        name="mnist",
        base_url="https://ossci-datasets.s3.amazonaws.com/mnist/",
        gz_md5={"train-images-idx3-ubyte": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
                "train-labels-idx1-ubyte": "d53e105ee54ea40749a09fcbcd1e9432",
                "t10k-images-idx3-ubyte": "9fb629c4189551a2d022fa330f9573f3",
                "t10k-labels-idx1-ubyte": "ec29112dd5afa0611ce80d1b7f02629c"},
        content_md5={"train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
                     "train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
                     "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
                     "t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637"},
        mean=0.1307, std=0.3081),
}


def default_cache_dir(source: IdxSource) -> Path:
    """``~/.cache/fedhet/<name>``: the one place the library consults the home directory."""
    return Path.home() / ".cache" / "fedhet" / source.name


def manual_install_hint(source: IdxSource, cache_dir: Path) -> str:
    """How to provide the files without a download, for error messages."""
    files = ", ".join(f"{stem}.gz" for stem in IDX_FILE_STEMS)
    hint = (f"To provide the files by hand, put the four files ({files}; raw or gzipped) in a directory and set "
            f"data.root to it, or put them in {cache_dir}.")
    if source.apt_package:
        system = SYSTEM_DATA_DIRS[source.name][0]
        hint += f" On Debian/Ubuntu, `apt-get install {source.apt_package}` installs them in {system}/."
    return hint


def locate_idx_files(source: IdxSource, *, root: Optional[Path], download: bool, cache_dir: Path,
                     system_dirs: Optional[Iterable[str | os.PathLike]] = None, timeout: float = 30.0) -> IdxFiles:
    """Find the four files (root, system dirs, cache dir), downloading the missing ones into the cache.
    A given ``root`` is the only directory searched, and nothing is downloaded for it.

    Raises :class:`DatasetNotFoundError` (download off) or :class:`DownloadError` (download failed),
    both listing every directory searched and how to provide the files by hand.
    """
    if root is not None:
        # An explicit data.root is the only place looked at: falling back to the system copy would
        # hide a typo and record the wrong root (docs/reliability.md, "Inputs and errors").
        try:
            return find_idx_files(source.name, root, cache_dir=None, system_dirs=())
        except DatasetNotFoundError as not_found:
            raise DatasetNotFoundError(f"data.root = {str(root)!r} does not hold the dataset: {not_found}. "
                                       "Fix data.root, or leave it unset to use the system directory or the "
                                       "cache") from None
    try:
        return find_idx_files(source.name, root, cache_dir=cache_dir, system_dirs=system_dirs)
    except DatasetNotFoundError as not_found:
        searched = str(not_found)
    hint = manual_install_hint(source, cache_dir)
    if not download:
        raise DatasetNotFoundError(f"{searched}\nDownloading is off (data.download = false). {hint}")
    _, missing = idx_files_in(cache_dir)
    for stem in missing:
        try:
            download_file(source.base_url + f"{stem}.gz", cache_dir / f"{stem}.gz", md5=source.gz_md5[stem],
                          timeout=timeout, manual_hint=hint)
        except DownloadError as error:
            raise DownloadError(f"{error}\n{searched}") from error
    return find_idx_files(source.name, None, cache_dir=cache_dir, system_dirs=())


def verify_idx_content(files: IdxFiles, source: IdxSource) -> list[str]:
    """The files whose uncompressed bytes differ from ``source.content_md5`` (empty: all match)."""
    mismatched = []
    for path in (files.train_images, files.train_labels, files.test_images, files.test_labels):
        stem = path.name.removesuffix(".gz")
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        if hashlib.md5(data).hexdigest() != source.content_md5[stem]:
            mismatched.append(str(path))
    return mismatched


def load_idx_dataset(key: str, source: IdxSource, *, root: Optional[str | os.PathLike] = None, download: bool = True,
                     cache_dir: Optional[str | os.PathLike] = None,
                     system_dirs: Optional[Iterable[str | os.PathLike]] = None) -> DatasetBundle:
    """Load an MNIST-like dataset as a normalised :class:`DatasetBundle` named ``key``."""
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir(source)
    files = locate_idx_files(source, root=Path(root).expanduser() if root is not None else None,
                             download=download, cache_dir=cache, system_dirs=system_dirs)
    splits = []
    for images_path, labels_path in ((files.train_images, files.train_labels), (files.test_images, files.test_labels)):
        images, labels = read_idx_split(images_path, labels_path)
        inputs = normalize_uint8_images(images.unsqueeze(1), (source.mean,), (source.std,))
        splits.append(TensorDataset(inputs, labels))
    return DatasetBundle(name=key, train=splits[0], test=splits[1], num_classes=10, input_shape=(1, 28, 28),
                         source_files=tuple(str(p) for p in (files.train_images, files.train_labels,
                                                             files.test_images, files.test_labels)))


@dataclasses.dataclass(frozen=True)
class IdxDatasetOptions(DataOptions):
    root: Optional[str] = option(None, help="directory holding the four IDX files (raw or .gz); when set, the only "
                                            "place searched (no fallback, no download)")
    download: bool = option(True, help="download missing files into cache_dir from the official mirror")
    cache_dir: Optional[str] = option(None, help="download/cache directory; none means ~/.cache/fedhet/<dataset>")


@DATASETS.register("fmnist", IdxDatasetOptions, seeded=False)
def make_fmnist(options: IdxDatasetOptions, *, seed: int) -> DatasetBundle:
    """Fashion-MNIST (Xiao et al. 2017): 60,000 + 10,000 28x28 grey images, 10 classes."""
    return load_idx_dataset("fmnist", IDX_SOURCES["fmnist"], root=options.root, download=options.download,
                            cache_dir=options.cache_dir)


@DATASETS.register("mnist", IdxDatasetOptions, seeded=False)
def make_mnist(options: IdxDatasetOptions, *, seed: int) -> DatasetBundle:
    """MNIST (LeCun et al. 1998): 60,000 + 10,000 28x28 grey digits, 10 classes."""
    return load_idx_dataset("mnist", IDX_SOURCES["mnist"], root=options.root, download=options.download,
                            cache_dir=options.cache_dir)


@dataclasses.dataclass(frozen=True)
class SyntheticOptions(DataOptions):
    alpha: float = option(1.0, help="spread of the local models (std of u_k)", symbol="alpha", ge=0)
    beta: float = option(1.0, help="spread of the local input means (std of B_k)", symbol="beta", ge=0)
    num_devices: int = option(30, help="number of devices (natural clients)", symbol="K", ge=1)
    iid: bool = option(False, help="one shared model and input law on all devices (alpha, beta unused)")
    max_device_size: Optional[int] = option(None, help="cap on examples per device; none: no cap (as FedProx)",
                                            ge=2)


@DATASETS.register("synthetic", SyntheticOptions)
def make_synthetic_dataset(options: SyntheticOptions, *, seed: int) -> DatasetBundle:
    """Synthetic(alpha, beta) of FedProx (Li et al. 2020): 60 features, 10 classes, natural devices."""
    return make_synthetic(options.alpha, options.beta, num_devices=options.num_devices, seed=seed, iid=options.iid,
                          max_device_size=options.max_device_size)
