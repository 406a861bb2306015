"""The IDX file format of MNIST and Fashion-MNIST: reading, writing and locating the four files.

Format (LeCun et al., http://yann.lecun.com/exdb/mnist/, section "FILE FORMATS"), all integers
big-endian::

    bytes 0-1   0x00 0x00                      (magic, part 1)
    byte  2     element type code              0x08 uint8, 0x09 int8, 0x0B int16,
                                               0x0C int32, 0x0D float32, 0x0E float64
    byte  3     number of dimensions d         (1 for label files, 3 for image files)
    4 * d       the size of each dimension     (uint32 each)
    payload     prod(sizes) elements, row-major (C order), big-endian

A file may be gzipped (``.gz`` suffix), as the official releases are. :func:`read_idx` checks the
magic, the type code, the dimensions and that the payload has exactly ``prod(sizes) * itemsize``
bytes; anything else raises :class:`DatasetFileError` naming the file and what is wrong.
"""
from __future__ import annotations

import dataclasses
import gzip
import io
import math
import os
import struct
import zlib
from pathlib import Path
from typing import Iterable, Optional

import numpy as np
import torch

from fedhet.core.io import atomic_write_bytes
from fedhet.data.errors import DatasetFileError
from fedhet.errors import FedhetError

# Type code -> big-endian NumPy dtype, as listed in the format description above.
IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

# The four files of an MNIST-like release, in the order (train images, train labels, test images,
# test labels). Each may be stored raw or gzipped.
IDX_FILE_STEMS: tuple[str, ...] = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)

# Where Debian-style packages install the datasets (`apt-get install dataset-fashion-mnist` puts the
# four gzipped files in /usr/share/datasets/fashion-mnist/). Keys are the canonical dataset names.
SYSTEM_DATA_DIRS: dict[str, tuple[str, ...]] = {
    "fashion-mnist": ("/usr/share/datasets/fashion-mnist",),
    "mnist": ("/usr/share/datasets/mnist",),
}


class DatasetNotFoundError(FedhetError, FileNotFoundError):
    """None of the searched directories holds a complete set of a dataset's files.

    The message lists every directory searched and what each lacked.
    """


@dataclasses.dataclass(frozen=True)
class IdxFiles:
    """The paths of the four files of an MNIST-like dataset (each raw or ``.gz``)."""

    train_images: Path
    train_labels: Path
    test_images: Path
    test_labels: Path

    @property
    def directory(self) -> Path:
        return self.train_images.parent


# Deflate cannot compress better than about 1032:1, so a header declaring more payload than that
# times the file's size describes a truncated file, refused before anything is inflated.
_MAX_DEFLATE_RATIO = 1032


def _decompress(path: Path, data: bytes) -> bytes:
    """The IDX bytes of a gzipped file, inflating no more than its header declares plus one byte (so
    :func:`parse_idx` still reports trailing bytes): ``gzip.decompress`` would inflate a 2 MB file of
    zeros to 2 GiB before the header is read."""
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
            head = stream.read(4)
            if len(head) < 4 or head[0] != 0 or head[1] != 0 or head[2] not in IDX_DTYPES or head[3] == 0:
                return head + stream.read(64)          # a bad header: parse_idx names what is wrong
            dims = stream.read(4 * head[3])
            if len(dims) < 4 * head[3]:
                return head + dims
            payload = math.prod(struct.unpack(f">{head[3]}I", dims)) * IDX_DTYPES[head[2]].itemsize
            if payload > _MAX_DEFLATE_RATIO * len(data) + 1024:
                raise DatasetFileError(f"{path}: the IDX header declares {payload} bytes of data, more than "
                                       f"{len(data)} gzipped bytes can hold; the file is truncated or corrupt")
            return head + dims + stream.read(payload + 1)
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:
        # EOFError: the gzip stream ends early (a truncated download); zlib.error: corrupt blocks.
        raise DatasetFileError(f"{path}: bad gzip data ({error}); the file is truncated or corrupt, "
                               "delete it and fetch it again") from error


def parse_idx(data: bytes, *, source: str = "<bytes>") -> np.ndarray:
    """Decode the bytes of an (uncompressed) IDX file into a native-endian NumPy array.

    ``source`` names the file in error messages.
    """
    if len(data) < 4:
        raise DatasetFileError(f"{source}: not an IDX file: {len(data)} bytes, fewer than the 4-byte magic number")
    zero0, zero1, type_code, ndim = data[0], data[1], data[2], data[3]
    if zero0 != 0 or zero1 != 0:
        raise DatasetFileError(f"{source}: bad magic number 0x{data[:4].hex()}: an IDX file starts with two zero "
                               "bytes (e.g. 0x00000803 for images, 0x00000801 for labels)")
    if type_code not in IDX_DTYPES:
        allowed = ", ".join(f"0x{code:02X}" for code in IDX_DTYPES)
        raise DatasetFileError(f"{source}: unknown IDX element type code 0x{type_code:02X}; allowed: {allowed}")
    if ndim == 0:
        raise DatasetFileError(f"{source}: IDX header declares 0 dimensions; expected at least 1")
    header_size = 4 + 4 * ndim
    if len(data) < header_size:
        raise DatasetFileError(f"{source}: truncated header: {ndim} dimensions need {header_size} header bytes, "
                               f"found {len(data)}")
    shape = struct.unpack(f">{ndim}I", data[4:header_size])
    dtype = IDX_DTYPES[type_code]
    expected = math.prod(shape) * dtype.itemsize
    found = len(data) - header_size
    if found != expected:
        what = "truncated" if found < expected else "has trailing bytes"
        raise DatasetFileError(f"{source}: payload {what}: shape {tuple(shape)} of {dtype.name} needs {expected} "
                               f"bytes after the {header_size}-byte header, found {found}")
    array = np.frombuffer(data, dtype=dtype, offset=header_size).reshape(shape)
    # Native byte order (and a writable copy) so torch can take it.
    return array.astype(dtype.newbyteorder("="))


def read_idx(path: str | os.PathLike) -> torch.Tensor:
    """Read an IDX file (gzipped when the name ends in ``.gz``) into a tensor.

    MNIST-like image files give uint8 ``[n, 28, 28]``, label files uint8 ``[n]``.
    Raises :class:`DatasetFileError` (a ``ValueError``) for a truncated or malformed file.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise DatasetFileError(f"{path}: cannot read IDX file ({error.strerror or error})") from error
    if path.suffix == ".gz":
        data = _decompress(path, data)
    return torch.from_numpy(parse_idx(data, source=str(path)))


def encode_idx(array: np.ndarray | torch.Tensor) -> bytes:
    """The IDX bytes (uncompressed) of ``array``; its dtype must be one of :data:`IDX_DTYPES`."""
    if isinstance(array, torch.Tensor):
        array = array.detach().cpu().numpy()
    array = np.asarray(array)
    for code, dtype in IDX_DTYPES.items():
        if array.dtype.newbyteorder(">") == dtype:
            break
    else:
        raise ValueError(f"cannot write dtype {array.dtype} as IDX; allowed: uint8, int8, int16, int32, "
                         "float32, float64")
    if array.ndim == 0 or array.ndim > 255:
        raise ValueError(f"an IDX array needs 1 to 255 dimensions, got {array.ndim}")
    header = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + np.ascontiguousarray(array, dtype=dtype).tobytes()


def write_idx(path: str | os.PathLike, array: np.ndarray | torch.Tensor) -> None:
    """Write ``array`` as an IDX file (gzipped when the name ends in ``.gz``), atomically."""
    path = Path(path)
    data = encode_idx(array)
    if path.suffix == ".gz":
        # mtime=0: the same array always gives the same bytes (reproducible fixtures).
        data = gzip.compress(data, mtime=0)
    atomic_write_bytes(path, data)


def idx_files_in(directory: str | os.PathLike) -> tuple[Optional[IdxFiles], list[str]]:
    """The four files in ``directory`` (raw preferred over ``.gz``) and the stems that are missing.

    Returns ``(files, [])`` when all four are present, else ``(None, missing_stems)``.
    """
    directory = Path(directory)
    found: list[Path] = []
    missing: list[str] = []
    for stem in IDX_FILE_STEMS:
        # A raw file is read without decompression, so it wins when both exist.
        for candidate in (directory / stem, directory / f"{stem}.gz"):
            if candidate.is_file():
                found.append(candidate)
                break
        else:
            missing.append(stem)
    if missing:
        return None, missing
    return IdxFiles(*found), []


def search_dirs(name: str, root: str | os.PathLike | None = None, *, cache_dir: str | os.PathLike | None = None,
                system_dirs: Iterable[str | os.PathLike] | None = None) -> list[Path]:
    """The directories searched for dataset ``name``, in order: ``root``, system dirs, ``cache_dir``.

    ``system_dirs=None`` means :data:`SYSTEM_DATA_DIRS` for ``name``.
    """
    if system_dirs is None:
        system_dirs = SYSTEM_DATA_DIRS.get(name, ())
    dirs = [Path(root)] if root is not None else []
    dirs += [Path(d) for d in system_dirs]
    if cache_dir is not None:
        dirs.append(Path(cache_dir))
    return dirs


def find_idx_files(name: str, root: str | os.PathLike | None = None, *,
                   cache_dir: str | os.PathLike | None = None,
                   system_dirs: Iterable[str | os.PathLike] | None = None) -> IdxFiles:
    """Locate the four IDX files of dataset ``name`` ("mnist" or "fashion-mnist").

    Looks in ``root`` (when given), then the system directories (:data:`SYSTEM_DATA_DIRS`, or
    ``system_dirs`` when given), then ``cache_dir`` (when given), and returns the first directory
    holding all four files, raw or gzipped. Raises :class:`DatasetNotFoundError` listing every
    directory searched and what it lacked.
    """
    report = []
    for directory in search_dirs(name, root, cache_dir=cache_dir, system_dirs=system_dirs):
        if not directory.is_dir():
            report.append(f"  {directory}: no such directory")
            continue
        files, missing = idx_files_in(directory)
        if files is not None:
            return files
        report.append(f"  {directory}: missing " + ", ".join(f"{stem}[.gz]" for stem in missing))
    searched = "\n".join(report) if report else "  (no directory to search)"
    raise DatasetNotFoundError(f"{name}: no directory holds the four IDX files "
                               f"({', '.join(IDX_FILE_STEMS)}, raw or .gz). Searched:\n{searched}")


def read_idx_split(images_path: str | os.PathLike, labels_path: str | os.PathLike, *,
                   image_shape: tuple[int, ...] = (28, 28), num_classes: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    """Read one split (images uint8 ``[n, *image_shape]``, labels int64 ``[n]``) and check they agree."""
    images = read_idx(images_path)
    labels = read_idx(labels_path)
    if images.dtype != torch.uint8 or tuple(images.shape[1:]) != tuple(image_shape):
        raise DatasetFileError(f"{images_path}: expected uint8 images of shape [n, {', '.join(map(str, image_shape))}], "
                               f"found {images.dtype} {tuple(images.shape)}")
    if labels.dim() != 1:
        raise DatasetFileError(f"{labels_path}: expected a 1-D label array, found shape {tuple(labels.shape)}")
    if len(labels) != len(images):
        raise DatasetFileError(f"{labels_path}: {len(labels)} labels for {len(images)} images in {images_path}")
    if labels.is_floating_point():      # NaN labels would read as -2**63 after the cast
        raise DatasetFileError(f"{labels_path}: labels are {str(labels.dtype).removeprefix('torch.')}; "
                               "expected an integer type (uint8)")
    labels = labels.to(torch.int64)
    if len(labels) and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
        raise DatasetFileError(f"{labels_path}: labels range over {int(labels.min())}..{int(labels.max())}, "
                               f"expected 0..{num_classes - 1}")
    return images, labels
