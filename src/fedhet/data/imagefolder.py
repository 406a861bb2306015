"""Image-folder datasets: CINIC-10 and TinyImageNet, decoded with Pillow and cached as tensors.

Layouts, exactly as the official archives extract:

- CINIC-10 (https://github.com/BayesWatch/cinic-10, ``CINIC-10.tar.gz`` from
  https://datashare.ed.ac.uk/handle/10283/3192): ``train/``, ``valid/``, ``test/``, each with one
  folder per class (``airplane`` .. ``truck``) of 32 x 32 PNG files, 9,000 per class and split.
  Class ids are the folder names in sorted order (which is CIFAR-10's label order).
- TinyImageNet (``tiny-imagenet-200.zip`` from http://cs231n.stanford.edu/tiny-imagenet-200.zip):
  ``wnids.txt`` (200 WordNet ids, one per line; class id = line order),
  ``train/<wnid>/images/*.JPEG`` (500 per class), ``val/images/*.JPEG`` (10,000) labelled by
  ``val/val_annotations.txt`` (tab-separated ``file, wnid, x0, y0, x1, y1``). The official ``test``
  split has no labels, so ``val`` is the test set (as in FedSpeed and most papers).

All images are converted to RGB (a few CINIC and TinyImageNet files are greyscale) and must have the
dataset's size. Decoding a few hundred thousand files takes minutes, so when ``cache_dir`` is given
the decoded uint8 tensor is saved there (atomically) as ``<dataset>-<split>-<fingerprint>.pt``; the
fingerprint hashes the ordered list of (relative path, file size, label), so adding, removing,
relabelling or replacing a file builds a new cache instead of reusing a stale one.
"""
from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import functools
import hashlib
import os
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from tqdm import tqdm  # not tqdm.auto: in Jupyter without ipywidgets that warns on every import of fedhet

from fedhet.core.dataset import DatasetBundle, TensorDataset
from fedhet.core.io import atomic_torch_save
from fedhet.data.errors import DatasetFileError
from fedhet.data.transforms import normalize_uint8_images

CINIC10_MEAN = (0.47889522, 0.47227842, 0.43047404)
CINIC10_STD = (0.24205776, 0.23828046, 0.25874835)
TINYIMAGENET_MEAN = (0.4802, 0.4481, 0.3975)
TINYIMAGENET_STD = (0.2770, 0.2691, 0.2821)

CINIC10_OFFICIAL_URL = "https://datashare.ed.ac.uk/handle/10283/3192"
TINYIMAGENET_OFFICIAL_URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
# Bumped when the cache file's content or layout changes, so old caches are not misread.
_CACHE_FORMAT = 1
_DECODE_CHUNK = 256


@dataclasses.dataclass(frozen=True)
class ImageEntry:
    """One image file of a split, its size in bytes (for the cache fingerprint) and its class id."""

    path: Path
    size: int
    label: int


def _pillow_image():
    try:
        from PIL import Image
    except ImportError as error:
        raise ImportError("reading image-folder datasets needs Pillow: pip install fedhet[formats]") from error
    return Image


def _image_files(directory: Path) -> list[os.DirEntry]:
    """The image files directly inside ``directory``, sorted by name (deterministic order)."""
    if not directory.is_dir():
        raise DatasetFileError(f"{directory}: missing directory")
    with os.scandir(directory) as it:
        files = [e for e in it if e.is_file() and e.name.lower().endswith(IMAGE_SUFFIXES)]
    return sorted(files, key=lambda e: e.name)


def fingerprint(entries: Sequence[ImageEntry], base: Path, *, height: int, width: int) -> str:
    """Hex BLAKE2b of the ordered (relative path, size, label) list and the image size."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"fedhet-imagefolder-cache v{_CACHE_FORMAT} {height}x{width}\n".encode())
    for entry in entries:
        digest.update(f"{entry.path.relative_to(base).as_posix()}\t{entry.size}\t{entry.label}\n".encode())
    return digest.hexdigest()


def _decode_chunk(entries: Sequence[ImageEntry], out: np.ndarray, start: int, height: int, width: int) -> int:
    image_module = _pillow_image()
    for offset, entry in enumerate(entries):
        try:
            with image_module.open(entry.path) as image:
                rgb = image.convert("RGB")  # forces the full decode, so truncation surfaces here
        except Exception as error:  # UnidentifiedImageError, OSError (truncated), SyntaxError, ...
            raise DatasetFileError(f"{entry.path}: cannot decode image ({type(error).__name__}: {error})") from error
        if rgb.size != (width, height):
            raise DatasetFileError(f"{entry.path}: image is {rgb.size[0]}x{rgb.size[1]}, expected {width}x{height}")
        out[start + offset] = np.asarray(rgb, dtype=np.uint8)
    return len(entries)


def decode_images(entries: Sequence[ImageEntry], *, height: int, width: int, num_workers: int | None = None,
                  description: str = "decoding images") -> torch.Tensor:
    """Decode ``entries`` to a uint8 tensor ``[n, 3, height, width]`` in entry order.

    Pillow releases the GIL while decoding, so a thread pool of ``num_workers`` (default: up to 8
    CPU cores) speeds this up; the result does not depend on the number of workers.
    """
    _pillow_image()  # fail early with the install hint
    workers = num_workers if num_workers is not None else min(8, os.cpu_count() or 1)
    out = np.empty((len(entries), height, width, 3), dtype=np.uint8)
    starts = range(0, len(entries), _DECODE_CHUNK)
    with tqdm(total=len(entries), desc=description, unit="img", disable=None, leave=False) as progress:
        if workers <= 1:
            for start in starts:
                progress.update(_decode_chunk(entries[start:start + _DECODE_CHUNK], out, start, height, width))
        else:
            with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
                futures = [pool.submit(_decode_chunk, entries[s:s + _DECODE_CHUNK], out, s, height, width)
                           for s in starts]
                try:
                    for future in futures:  # in submission order: the first failing chunk's error wins
                        progress.update(future.result())
                except BaseException:
                    for future in futures:
                        future.cancel()
                    raise
    return torch.from_numpy(out).permute(0, 3, 1, 2).contiguous()


def _load_cache(path: Path, expected: str) -> tuple[torch.Tensor, torch.Tensor] | None:
    try:
        cached = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # a damaged cache is rebuilt, never trusted
        warnings.warn(f"{path}: unreadable image cache ({type(error).__name__}: {error}); rebuilding it")
        return None
    if not isinstance(cached, dict) or cached.get("fingerprint") != expected or cached.get("format") != _CACHE_FORMAT:
        warnings.warn(f"{path}: image cache does not match the files; rebuilding it")
        return None
    return cached["images"], cached["targets"]


def load_entries(entries: Sequence[ImageEntry], *, base: Path, dataset: str, split: str, height: int, width: int,
                 cache_dir: str | Path | None, num_workers: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 images ``[n, 3, H, W]`` and int64 labels for ``entries``, through the cache when given."""
    if not entries:
        raise DatasetFileError(f"{base}: the {split} split has no image files ({', '.join(IMAGE_SUFFIXES)})")
    targets = torch.tensor([entry.label for entry in entries], dtype=torch.int64)
    cache_path = None
    if cache_dir is not None:
        key = fingerprint(entries, base, height=height, width=width)
        cache_path = Path(cache_dir).expanduser() / f"{dataset}-{split}-{key[:24]}.pt"
        if cache_path.is_file():
            cached = _load_cache(cache_path, key)
            if cached is not None:
                return cached
    images = decode_images(entries, height=height, width=width, num_workers=num_workers,
                           description=f"decoding {dataset} {split}")
    if cache_path is not None:
        atomic_torch_save(cache_path, {"format": _CACHE_FORMAT, "fingerprint": key,
                                       "images": images, "targets": targets})
    return images, targets


def class_folder_entries(split_dir: Path, classes: Sequence[str]) -> list[ImageEntry]:
    """Entries of ``split_dir/<class>/<image>`` with label = position of ``<class>`` in ``classes``."""
    entries = []
    for label, name in enumerate(classes):
        for file in _image_files(split_dir / name):
            entries.append(ImageEntry(Path(file.path), file.stat().st_size, label))
    return entries


def _subdirectories(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.is_dir())


def load_cinic10(root: str | Path, *, cache_dir: str | Path | None = None, include_valid: bool = False,
                 num_workers: int | None = None) -> DatasetBundle:
    """CINIC-10: ``train`` (plus ``valid`` when ``include_valid``) and ``test``, 90,000 images each,
    as float32 ``[n, 3, 32, 32]`` normalised with :data:`CINIC10_MEAN` / :data:`CINIC10_STD`;
    int64 labels 0..9 (class folders in sorted order).

    ``root`` holds ``train/``, ``valid/``, ``test/`` (see module doc).
    """
    root = Path(root).expanduser()
    layout = (f"expected {root}/train/<class>/*.png, {root}/valid/<class>/*.png and {root}/test/<class>/*.png "
              f"as extracted from CINIC-10.tar.gz ({CINIC10_OFFICIAL_URL})")
    if not (root / "train").is_dir() or not (root / "test").is_dir():
        raise DatasetFileError(f"{root}: no CINIC-10 train/ and test/ folders; {layout}")
    classes = _subdirectories(root / "train")
    if len(classes) != 10:
        raise DatasetFileError(f"{root / 'train'}: expected 10 class folders, found {len(classes)} ({classes}); {layout}")
    train_splits = ["train", "valid"] if include_valid else ["train"]
    for split in train_splits + ["test"]:
        found = _subdirectories(root / split) if (root / split).is_dir() else []
        if found != classes:
            raise DatasetFileError(f"{root / split}: class folders {found} differ from train/'s {classes}; {layout}")

    def load(split: str) -> tuple[torch.Tensor, torch.Tensor]:
        return load_entries(class_folder_entries(root / split, classes), base=root, dataset="cinic10", split=split,
                            height=32, width=32, cache_dir=cache_dir, num_workers=num_workers)

    train_parts = [load(split) for split in train_splits]
    test_images, test_labels = load("test")
    train_images = torch.cat([images for images, _ in train_parts])
    train_labels = torch.cat([labels for _, labels in train_parts])
    return DatasetBundle(
        name="cinic10",
        train=TensorDataset(normalize_uint8_images(train_images, CINIC10_MEAN, CINIC10_STD), train_labels),
        test=TensorDataset(normalize_uint8_images(test_images, CINIC10_MEAN, CINIC10_STD), test_labels),
        num_classes=10,
        input_shape=(3, 32, 32),
    )


def _tinyimagenet_dir(root: Path) -> Path:
    for candidate in (root, root / "tiny-imagenet-200"):
        if (candidate / "wnids.txt").is_file():
            return candidate
    raise DatasetFileError(
        f"{root}: no TinyImageNet wnids.txt; expected {root}/tiny-imagenet-200/ (or {root} itself) holding "
        f"wnids.txt, train/<wnid>/images/*.JPEG, val/images/*.JPEG and val/val_annotations.txt, "
        f"as extracted from {TINYIMAGENET_OFFICIAL_URL}")


def read_wnids(path: Path) -> list[str]:
    """The class WordNet ids of ``wnids.txt`` in file order (class id = line index)."""
    wnids = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    duplicates = sorted(w for w, count in collections.Counter(wnids).items() if count > 1)
    if not wnids or duplicates:
        raise DatasetFileError(f"{path}: expected one unique WordNet id per line"
                               + (f"; duplicated: {duplicates}" if duplicates else "; the file is empty"))
    return wnids


def tinyimagenet_val_entries(base: Path, class_of: dict[str, int]) -> list[ImageEntry]:
    """``val/images/<file>`` labelled by ``val/val_annotations.txt`` (``file<TAB>wnid<TAB>box...``)."""
    annotations = base / "val" / "val_annotations.txt"
    if not annotations.is_file():
        raise DatasetFileError(f"{annotations}: missing; TinyImageNet labels its val images there")
    entries = []
    for number, line in enumerate(annotations.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 2 or fields[1] not in class_of:
            raise DatasetFileError(f"{annotations}, line {number}: expected '<file>\\t<wnid>\\t...' with a wnid from "
                                   f"wnids.txt, found {line!r}")
        path = base / "val" / "images" / fields[0]
        if not path.is_file():
            raise DatasetFileError(f"{path}: listed in {annotations} (line {number}) but missing")
        entries.append(ImageEntry(path, path.stat().st_size, class_of[fields[1]]))
    return sorted(entries, key=lambda e: e.path.name)


def load_tinyimagenet(root: str | Path, *, cache_dir: str | Path | None = None,
                      num_workers: int | None = None) -> DatasetBundle:
    """TinyImageNet: 100,000 train and 10,000 val (used as test) images as float32 ``[n, 3, 64, 64]``
    normalised with :data:`TINYIMAGENET_MEAN` / :data:`TINYIMAGENET_STD`; int64 labels 0..199 in
    ``wnids.txt`` order.

    ``root`` is ``tiny-imagenet-200/`` or its parent (see module doc).
    """
    base = _tinyimagenet_dir(Path(root).expanduser())
    wnids = read_wnids(base / "wnids.txt")
    class_of = {wnid: label for label, wnid in enumerate(wnids)}
    train_entries = []
    for label, wnid in enumerate(wnids):
        for file in _image_files(base / "train" / wnid / "images"):
            train_entries.append(ImageEntry(Path(file.path), file.stat().st_size, label))
    load = functools.partial(load_entries, base=base, dataset="tinyimagenet", height=64, width=64,
                             cache_dir=cache_dir, num_workers=num_workers)
    train_images, train_labels = load(train_entries, split="train")
    test_images, test_labels = load(tinyimagenet_val_entries(base, class_of), split="val")
    return DatasetBundle(
        name="tinyimagenet",
        train=TensorDataset(normalize_uint8_images(train_images, TINYIMAGENET_MEAN, TINYIMAGENET_STD), train_labels),
        test=TensorDataset(normalize_uint8_images(test_images, TINYIMAGENET_MEAN, TINYIMAGENET_STD), test_labels),
        num_classes=len(wnids),
        input_shape=(3, 64, 64),
    )
