"""CIFAR-10 and CIFAR-100 from the official "python version" pickle batches.

Format (https://www.cs.toronto.edu/~kriz/cifar.html):

- CIFAR-10, ``cifar-10-python.tar.gz`` -> ``cifar-10-batches-py/``: ``data_batch_1`` .. ``data_batch_5``
  (10,000 images each), ``test_batch`` and ``batches.meta``. Each batch is a Python 2 pickle of a dict
  with byte-string keys: ``b"data"`` a uint8 array ``[n, 3072]`` (1024 red, then 1024 green, then
  1024 blue values, each a row-major 32 x 32 plane) and ``b"labels"`` a list of n ints in 0..9;
  ``batches.meta`` holds ``b"label_names"``.
- CIFAR-100, ``cifar-100-python.tar.gz`` -> ``cifar-100-python/``: ``train`` (50,000), ``test``
  (10,000) and ``meta``; the label keys are ``b"fine_labels"`` (100 classes) and
  ``b"coarse_labels"`` (20 superclasses); ``meta`` holds ``b"fine_label_names"`` and
  ``b"coarse_label_names"``.

``root`` may be the extracted directory, its parent, the ``.tar.gz`` archive, or a directory holding
the archive; archives are read in memory, never extracted.

Security: unpickling runs code named in the file, so a malicious "dataset" could execute anything.
These loaders unpickle with a restricted unpickler that only resolves the few NumPy and codec names
the official files use and refuses everything else; still, load only files from a source you trust.
"""
from __future__ import annotations

import dataclasses
import io
import pickle
import tarfile
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from fedhet.core.dataset import DatasetBundle, TensorDataset
from fedhet.data.errors import DatasetFileError
from fedhet.data.transforms import normalize_uint8_images

# Channel statistics of the training sets (the values used throughout the CIFAR literature).
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
CIFAR100_MEAN = (0.5071, 0.4865, 0.4409)
CIFAR100_STD = (0.2673, 0.2564, 0.2762)

CIFAR_OFFICIAL_URL = "https://www.cs.toronto.edu/~kriz/cifar.html"


def _numpy_pickle_globals() -> dict[tuple[str, str], Any]:
    """The globals an official CIFAR pickle (or a NumPy re-pickle of it) may name.

    Python 2 pickles name ``numpy.core.multiarray``; NumPy 2 renamed it ``numpy._core``; both map to
    the object of the installed NumPy so no deprecated module is imported.
    """
    try:
        from numpy._core import multiarray, numeric  # NumPy >= 2
    except ImportError:  # pragma: no cover - NumPy 1.x
        from numpy.core import multiarray, numeric  # type: ignore[no-redef]
    import codecs

    allowed: dict[tuple[str, str], Any] = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype,
                                           ("_codecs", "encode"): codecs.encode}
    for package in ("numpy.core", "numpy._core"):
        allowed[(f"{package}.multiarray", "_reconstruct")] = multiarray._reconstruct
        allowed[(f"{package}.multiarray", "scalar")] = multiarray.scalar
        # Private and absent from NumPy's stubs, but the pickles of arrays name it.
        frombuffer = numeric._frombuffer  # pyright: ignore[reportAttributeAccessIssue]
        allowed[(f"{package}.numeric", "_frombuffer")] = frombuffer
    return allowed


class _RestrictedUnpickler(pickle.Unpickler):
    """Resolves only NumPy array/dtype reconstruction and ``_codecs.encode``; refuses other globals."""

    def __init__(self, file: io.BufferedIOBase, source: str):
        super().__init__(file, encoding="bytes")  # Python 2 ``str`` keys become ``bytes``, as on disk
        self._source = source
        self._allowed = _numpy_pickle_globals()

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self._allowed:
            return self._allowed[(module, name)]
        raise DatasetFileError(f"{self._source}: the pickle refers to {module}.{name}, which a CIFAR batch "
                               "never does; refusing to load it (it could run arbitrary code)")


def unpickle_batch(data: bytes, source: str) -> dict:
    """Unpickle one CIFAR batch file's bytes into its dict (byte-string keys), or raise naming ``source``."""
    try:
        obj = _RestrictedUnpickler(io.BytesIO(data), source).load()
    except DatasetFileError:
        raise
    except Exception as error:  # truncated or not a pickle: EOFError, UnpicklingError, ValueError, ...
        raise DatasetFileError(f"{source}: not a readable CIFAR pickle batch "
                               f"({type(error).__name__}: {error}); re-extract it from the official archive "
                               f"({CIFAR_OFFICIAL_URL})") from error
    if not isinstance(obj, dict):
        raise DatasetFileError(f"{source}: expected a pickled dict, found {type(obj).__name__}")
    return obj


@dataclasses.dataclass(frozen=True)
class _CifarLayout:
    name: str
    folder: str  # the directory inside the archive
    archive: str
    train_files: tuple[str, ...]
    test_file: str
    meta_file: str


CIFAR10_LAYOUT = _CifarLayout("cifar10", "cifar-10-batches-py", "cifar-10-python.tar.gz",
                              tuple(f"data_batch_{k}" for k in range(1, 6)), "test_batch", "batches.meta")
CIFAR100_LAYOUT = _CifarLayout("cifar100", "cifar-100-python", "cifar-100-python.tar.gz",
                               ("train",), "test", "meta")


def _is_archive(path: Path) -> bool:
    return path.is_file() and (path.name.endswith(".tar.gz") or path.suffix in (".tgz", ".tar"))


def _reader_for(root: str | Path, layout: _CifarLayout) -> tuple[Callable[[str], bytes], str]:
    """A function from a batch file name to its bytes, and a description of where they come from."""
    root = Path(root).expanduser()
    if _is_archive(root):
        return _archive_reader(root, layout), str(root)
    candidates = [root / layout.folder, root]
    for directory in candidates:
        if (directory / layout.test_file).is_file():
            def read(name: str, directory: Path = directory) -> bytes:
                path = directory / name
                if not path.is_file():
                    raise DatasetFileError(f"{path}: missing; {layout.folder}/ must hold "
                                           + ", ".join(layout.train_files + (layout.test_file, layout.meta_file)))
                return path.read_bytes()
            return read, str(directory)
    if (root / layout.archive).is_file():
        return _archive_reader(root / layout.archive, layout), str(root / layout.archive)
    raise DatasetFileError(
        f"{root}: no {layout.name} files found; expected {root}/{layout.folder}/ (holding "
        + ", ".join(layout.train_files + (layout.test_file, layout.meta_file))
        + f") or {root}/{layout.archive}, the 'python version' from {CIFAR_OFFICIAL_URL}")


def _archive_reader(archive: Path, layout: _CifarLayout) -> Callable[[str], bytes]:
    try:
        with tarfile.open(archive, "r:*") as tar:
            contents = {}
            for member in tar.getmembers():
                parts = Path(member.name).parts
                if member.isfile() and len(parts) >= 2 and parts[-2] == layout.folder:
                    handle = tar.extractfile(member)
                    contents[parts[-1]] = handle.read() if handle is not None else b""
    except (tarfile.TarError, EOFError, OSError) as error:
        raise DatasetFileError(f"{archive}: not a readable tar archive ({type(error).__name__}: {error}); "
                               f"download it again from {CIFAR_OFFICIAL_URL}") from error

    def read(name: str) -> bytes:
        if name not in contents:
            raise DatasetFileError(f"{archive}: has no member {layout.folder}/{name}")
        return contents[name]
    return read


def _images_from(batch: dict, source: str) -> np.ndarray:
    if b"data" not in batch:
        raise DatasetFileError(f"{source}: missing key b'data' (keys: {sorted(map(repr, batch))})")
    data = batch[b"data"]
    # Type first, np.asarray never: a tiny pickle of nested lists sharing references expands into
    # gigabytes under np.asarray (the official files hold an ndarray here).
    if not isinstance(data, np.ndarray):
        raise DatasetFileError(f"{source}: b'data' must be a uint8 array [n, 3072], found {type(data).__name__}")
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise DatasetFileError(f"{source}: b'data' must be uint8 [n, 3072], found {data.dtype} {list(data.shape)}")
    return data.reshape(-1, 3, 32, 32)  # rows are R, G, B planes, each row-major 32 x 32


def _labels_from(batch: dict, key: bytes, num_classes: int, count: int, source: str) -> np.ndarray:
    if key not in batch:
        raise DatasetFileError(f"{source}: missing key {key!r} (keys: {sorted(map(repr, batch))})")
    labels = batch[key]
    # The official files hold a list of ints; check that before np.asarray (see _images_from).
    if isinstance(labels, (list, tuple)):
        if len(labels) != count or not all(type(label) is int for label in labels):
            kinds = sorted({type(label).__name__ for label in labels[:100]})
            raise DatasetFileError(f"{source}: {key!r} must be {count} integers, found a list of {len(labels)} "
                                   f"({', '.join(kinds) or 'empty'})")
    elif not isinstance(labels, np.ndarray):
        raise DatasetFileError(f"{source}: {key!r} must be a list of {count} integers, found {type(labels).__name__}")
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.shape[0] != count or not np.issubdtype(labels.dtype, np.integer):
        raise DatasetFileError(f"{source}: {key!r} must be {count} integers, found {labels.dtype} {list(labels.shape)}")
    if count and (labels.min() < 0 or labels.max() >= num_classes):
        raise DatasetFileError(f"{source}: {key!r} has labels outside 0..{num_classes - 1} "
                               f"(min {labels.min()}, max {labels.max()})")
    return labels.astype(np.int64)


def _check_meta(read: Callable[[str], bytes], where: str, layout: _CifarLayout, key: bytes, num_classes: int) -> None:
    source = f"{where}/{layout.meta_file}"
    meta = unpickle_batch(read(layout.meta_file), source)
    names = meta.get(key)
    if names is not None and not isinstance(names, (list, tuple, np.ndarray)):
        raise DatasetFileError(f"{source}: {key!r} must be a list of class names, found {type(names).__name__}")
    if names is None or len(names) != num_classes:
        found = "missing" if names is None else f"{len(names)} names"
        raise DatasetFileError(f"{source}: {key!r} must list {num_classes} class names, found {found}")


def _load_split(read: Callable[[str], bytes], where: str, files: tuple[str, ...], label_key: bytes,
                num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    images, labels = [], []
    for name in files:
        source = f"{where}/{name}"
        batch = unpickle_batch(read(name), source)
        batch_images = _images_from(batch, source)
        images.append(batch_images)
        labels.append(_labels_from(batch, label_key, num_classes, len(batch_images), source))
    return torch.from_numpy(np.concatenate(images)), torch.from_numpy(np.concatenate(labels))


def _bundle(name: str, train: tuple[torch.Tensor, torch.Tensor], test: tuple[torch.Tensor, torch.Tensor],
            num_classes: int, mean: tuple[float, ...], std: tuple[float, ...]) -> DatasetBundle:
    return DatasetBundle(
        name=name,
        train=TensorDataset(normalize_uint8_images(train[0], mean, std), train[1]),
        test=TensorDataset(normalize_uint8_images(test[0], mean, std), test[1]),
        num_classes=num_classes,
        input_shape=(3, 32, 32),
    )


def _source_files(where: str, layout: _CifarLayout) -> tuple[str, ...]:
    """The files a dataset was read from: the archive, or the batch files of the directory."""
    if Path(where).is_file():
        return (where,)
    return tuple(str(Path(where) / name) for name in layout.train_files + (layout.test_file, layout.meta_file))


def load_cifar10(root: str | Path) -> DatasetBundle:
    """CIFAR-10: 50,000 train / 10,000 test images ``[n, 3, 32, 32]`` float32, normalised with
    :data:`CIFAR10_MEAN` / :data:`CIFAR10_STD`; int64 labels 0..9.

    ``root``: ``cifar-10-batches-py/``, its parent, or ``cifar-10-python.tar.gz`` (or its directory).
    Unpickles with a restricted unpickler; see the module docstring on trusting pickle files.
    """
    layout = CIFAR10_LAYOUT
    read, where = _reader_for(root, layout)
    _check_meta(read, where, layout, b"label_names", 10)
    train = _load_split(read, where, layout.train_files, b"labels", 10)
    test = _load_split(read, where, (layout.test_file,), b"labels", 10)
    bundle = _bundle("cifar10", train, test, 10, CIFAR10_MEAN, CIFAR10_STD)
    bundle.source_files = _source_files(where, layout)
    return bundle


def load_cifar100(root: str | Path, *, label_mode: str = "fine") -> DatasetBundle:
    """CIFAR-100: 50,000 train / 10,000 test images ``[n, 3, 32, 32]`` float32, normalised with
    :data:`CIFAR100_MEAN` / :data:`CIFAR100_STD`; int64 labels from ``b"fine_labels"`` (100 classes,
    ``label_mode="fine"``) or ``b"coarse_labels"`` (20 superclasses, ``label_mode="coarse"``).

    ``root``: ``cifar-100-python/``, its parent, or ``cifar-100-python.tar.gz`` (or its directory).
    Unpickles with a restricted unpickler; see the module docstring on trusting pickle files.
    """
    if label_mode not in ("fine", "coarse"):
        raise ValueError(f"label_mode = {label_mode!r}: allowed 'fine' (100 classes) or 'coarse' (20 classes)")
    num_classes = 100 if label_mode == "fine" else 20
    label_key = f"{label_mode}_labels".encode()
    layout = CIFAR100_LAYOUT
    read, where = _reader_for(root, layout)
    _check_meta(read, where, layout, f"{label_mode}_label_names".encode(), num_classes)
    train = _load_split(read, where, layout.train_files, label_key, num_classes)
    test = _load_split(read, where, (layout.test_file,), label_key, num_classes)
    bundle = _bundle("cifar100", train, test, num_classes, CIFAR100_MEAN, CIFAR100_STD)
    bundle.source_files = _source_files(where, layout)
    return bundle
