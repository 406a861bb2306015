"""Registrations of the papers' file-based datasets in :data:`fedhet.core.registry.DATASETS`.

Names: ``cifar10``, ``cifar100``, ``svhn``, ``cinic10``, ``tinyimagenet``, ``agnews``, ``femnist``.
None of them can be downloaded by fedhet here: the user places the official files under
``data.root`` (each option class's ``root`` help gives the layout and the source).

Training augmentation (``augment = true``, the default for the image datasets) is the papers'
torchvision pipeline ``RandomCrop(size, padding=4)`` + ``RandomHorizontalFlip()`` (FedSpeed,
FedAU and FedAWARE train CIFAR-like data with it), applied per minibatch on normalised tensors; the
crop pads with the normalised value of black so it matches torchvision's zero padding of the raw
image (see :mod:`fedhet.data.transforms`). SVHN gets the crop only: mirrored digits are not digits.
FEMNIST and AG News are used without augmentation.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

from fedhet.core.dataset import BatchTransform, DatasetBundle
from fedhet.core.options import ConfigError, option
from fedhet.core.registry import DATASETS
from fedhet.data.agnews import AGNEWS_SOURCE, load_agnews
from fedhet.data.cifar import (
    CIFAR10_MEAN,
    CIFAR10_STD,
    CIFAR100_MEAN,
    CIFAR100_STD,
    CIFAR_OFFICIAL_URL,
    load_cifar10,
    load_cifar100,
)
from fedhet.data.femnist import FEMNIST_SOURCE, load_femnist
from fedhet.data.imagefolder import (
    CINIC10_MEAN,
    CINIC10_OFFICIAL_URL,
    CINIC10_STD,
    TINYIMAGENET_MEAN,
    TINYIMAGENET_OFFICIAL_URL,
    TINYIMAGENET_STD,
    load_cinic10,
    load_tinyimagenet,
)
from fedhet.data.svhn import SVHN_MEAN, SVHN_OFFICIAL_URL, SVHN_STD, load_svhn
from fedhet.data.transforms import black_fill, compose, random_crop, random_horizontal_flip
from fedhet.data.validation import DataOptions

CROP_PADDING = 4  # torchvision RandomCrop(32, padding=4), as in the papers' code

_NO_DOWNLOAD = "fedhet cannot download it here: place the official files there yourself"

CIFAR10_LAYOUT = (f"a directory holding cifar-10-batches-py/ (data_batch_1..5, test_batch, batches.meta) "
                  f"or cifar-10-python.tar.gz, the 'python version' from {CIFAR_OFFICIAL_URL}")
CIFAR100_LAYOUT = (f"a directory holding cifar-100-python/ (train, test, meta) or cifar-100-python.tar.gz, "
                   f"the 'python version' from {CIFAR_OFFICIAL_URL}")
SVHN_LAYOUT = f"a directory holding train_32x32.mat and test_32x32.mat (cropped digits) from {SVHN_OFFICIAL_URL}"
CINIC10_LAYOUT = (f"the extracted CINIC-10 directory holding train/, valid/, test/ (one folder of PNGs per "
                  f"class) from {CINIC10_OFFICIAL_URL}")
TINYIMAGENET_LAYOUT = (f"tiny-imagenet-200/ (or its parent) holding wnids.txt, train/<wnid>/images/*.JPEG, "
                       f"val/images/*.JPEG and val/val_annotations.txt, from {TINYIMAGENET_OFFICIAL_URL}")
AGNEWS_LAYOUT = f"a directory holding train.csv and test.csv (or ag_news_csv/ with them), from {AGNEWS_SOURCE}"
FEMNIST_LAYOUT = f"LEAF's data/femnist/data directory holding train/*.json and test/*.json; {FEMNIST_SOURCE}"


def require_root(root: str | None, layout: str) -> str:
    """``root`` itself, or a :class:`ConfigError` on ``data.root`` saying what to put where."""
    if root is None or not str(root).strip():
        raise ConfigError("data.root", root, f"required: {layout}; {_NO_DOWNLOAD}")
    return root


def paper_augmentation(mean: Sequence[float], std: Sequence[float], *, flip: bool = True) -> BatchTransform:
    """Random crop with 4-pixel black padding, then (``flip``) a random horizontal flip with p = 0.5."""
    crop = random_crop(CROP_PADDING, fill=black_fill(mean, std))
    return compose(crop, random_horizontal_flip(0.5)) if flip else crop


def _with_augmentation(bundle: DatasetBundle, augment: bool, mean: Sequence[float], std: Sequence[float], *,
                       flip: bool = True) -> DatasetBundle:
    if augment:
        bundle.train_transform = paper_augmentation(mean, std, flip=flip)
    return bundle


def _root_option(layout: str):
    return option(None, help=f"dataset location (required): {layout}")


def _augment_option(what: str = "random crop (padding 4) + horizontal flip"):
    return option(True, help=f"training augmentation per minibatch: {what}")


_CACHE_HELP = ("directory for the decoded-image cache (<dataset>-<split>-<fingerprint>.pt); "
               "unset = decode the image files on every load")


@dataclasses.dataclass(frozen=True)
class Cifar10Options(DataOptions):
    root: str | None = _root_option(CIFAR10_LAYOUT)
    augment: bool = _augment_option()


@dataclasses.dataclass(frozen=True)
class Cifar100Options(DataOptions):
    root: str | None = _root_option(CIFAR100_LAYOUT)
    augment: bool = _augment_option()
    label_mode: str = option("fine", help="fine = 100 classes, coarse = 20 superclasses",
                             choices=("fine", "coarse"))


@dataclasses.dataclass(frozen=True)
class SvhnOptions(DataOptions):
    root: str | None = _root_option(SVHN_LAYOUT)
    augment: bool = _augment_option("random crop (padding 4); no flips, which would not keep digits digits")
    include_extra: bool = option(False, help="add the 531,131 'extra' digits (extra_32x32.mat) to the training set")


@dataclasses.dataclass(frozen=True)
class Cinic10Options(DataOptions):
    root: str | None = _root_option(CINIC10_LAYOUT)
    augment: bool = _augment_option()
    cache_dir: str | None = option(None, help=_CACHE_HELP)
    include_valid: bool = option(False, help="train on train/ + valid/ (180,000 images) instead of train/ alone")


@dataclasses.dataclass(frozen=True)
class TinyImageNetOptions(DataOptions):
    root: str | None = _root_option(TINYIMAGENET_LAYOUT)
    augment: bool = _augment_option()
    cache_dir: str | None = option(None, help=_CACHE_HELP)


@dataclasses.dataclass(frozen=True)
class AgNewsOptions(DataOptions):
    root: str | None = _root_option(AGNEWS_LAYOUT)
    tokenizer: str | None = option(None, help="local directory of a Hugging Face tokenizer (e.g. Pythia-70M's; "
                                              "needs fedhet[nlp]; never downloaded); unset = the built-in "
                                              "word tokenizer (not Pythia's BPE)")
    vocab_size: int = option(30000, ge=1, help="built-in tokenizer: most frequent training words kept "
                                               "(ids 0 = pad, 1 = unknown, words 2..vocab_size+1)")
    max_length: int = option(128, ge=1, help="tokens per example: longer texts are truncated, shorter right-padded")


@dataclasses.dataclass(frozen=True)
class FemnistOptions(DataOptions):
    root: str | None = _root_option(FEMNIST_LAYOUT)
    invert: bool = option(False, help="use 1 - pixel (white ink on black) instead of LEAF's black ink on white")


@DATASETS.register("cifar10", Cifar10Options)
def make_cifar10(options: Cifar10Options, *, seed: int) -> DatasetBundle:
    """CIFAR-10 (python pickle batches), 10 classes, 3x32x32."""
    bundle = load_cifar10(require_root(options.root, CIFAR10_LAYOUT))
    return _with_augmentation(bundle, options.augment, CIFAR10_MEAN, CIFAR10_STD)


@DATASETS.register("cifar100", Cifar100Options)
def make_cifar100(options: Cifar100Options, *, seed: int) -> DatasetBundle:
    """CIFAR-100 (python pickle batches), 100 fine or 20 coarse classes, 3x32x32."""
    bundle = load_cifar100(require_root(options.root, CIFAR100_LAYOUT), label_mode=options.label_mode)
    return _with_augmentation(bundle, options.augment, CIFAR100_MEAN, CIFAR100_STD)


@DATASETS.register("svhn", SvhnOptions)
def make_svhn(options: SvhnOptions, *, seed: int) -> DatasetBundle:
    """SVHN cropped digits (.mat), 10 classes, 3x32x32; needs scipy (fedhet[formats])."""
    bundle = load_svhn(require_root(options.root, SVHN_LAYOUT), include_extra=options.include_extra)
    return _with_augmentation(bundle, options.augment, SVHN_MEAN, SVHN_STD, flip=False)


@DATASETS.register("cinic10", Cinic10Options)
def make_cinic10(options: Cinic10Options, *, seed: int) -> DatasetBundle:
    """CINIC-10 (image folders), 10 classes, 3x32x32; needs Pillow (fedhet[formats])."""
    bundle = load_cinic10(require_root(options.root, CINIC10_LAYOUT), cache_dir=options.cache_dir,
                          include_valid=options.include_valid)
    return _with_augmentation(bundle, options.augment, CINIC10_MEAN, CINIC10_STD)


@DATASETS.register("tinyimagenet", TinyImageNetOptions)
def make_tinyimagenet(options: TinyImageNetOptions, *, seed: int) -> DatasetBundle:
    """TinyImageNet (image folders), 200 classes, 3x64x64; needs Pillow (fedhet[formats])."""
    bundle = load_tinyimagenet(require_root(options.root, TINYIMAGENET_LAYOUT), cache_dir=options.cache_dir)
    return _with_augmentation(bundle, options.augment, TINYIMAGENET_MEAN, TINYIMAGENET_STD)


@DATASETS.register("agnews", AgNewsOptions)
def make_agnews(options: AgNewsOptions, *, seed: int) -> DatasetBundle:
    """AG News (CSV), 4 classes, int64 token ids [max_length]."""
    return load_agnews(require_root(options.root, AGNEWS_LAYOUT), tokenizer=options.tokenizer,
                       vocab_size=options.vocab_size, max_length=options.max_length)


@DATASETS.register("femnist", FemnistOptions)
def make_femnist(options: FemnistOptions, *, seed: int) -> DatasetBundle:
    """FEMNIST (LEAF JSON), 62 classes, 1x28x28, natural per-writer partition."""
    return load_femnist(require_root(options.root, FEMNIST_LAYOUT), invert=options.invert)
