"""The registered MNIST-like datasets: options, search order, and the real Fashion-MNIST when installed."""
import gzip
from pathlib import Path

import numpy as np
import pytest
import torch

from fedhet.core.options import ConfigError, build_options
from fedhet.core.registry import DATASETS
from fedhet.data.datasets import IDX_SOURCES, verify_idx_content
from fedhet.data.idx import IDX_FILE_STEMS, DatasetNotFoundError, find_idx_files

FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")


def _make(name, values):
    entry = DATASETS.get(name)
    return entry.factory(build_options(entry.options_cls, values, section="data"), seed=0)


def test_names_and_option_validation():
    for name in ("fmnist", "mnist", "synthetic"):
        assert name in DATASETS
    with pytest.raises(ConfigError) as info:
        build_options(DATASETS.get("mnist").options_cls, {"downlaod": False}, section="data")
    assert "did you mean data.download" in str(info.value)
    with pytest.raises(ConfigError, match="data.root"):
        build_options(DATASETS.get("fmnist").options_cls, {"root": 3}, section="data")


def test_mnist_from_root_through_the_registry(tmp_path, make_idx_bytes):
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (4, 28, 28), dtype=np.uint8)
    labels = np.array([3, 1, 4, 1], dtype=np.uint8)
    for stem, array in zip(IDX_FILE_STEMS, (images, labels, images[:1], labels[:1])):
        (tmp_path / f"{stem}.gz").write_bytes(gzip.compress(make_idx_bytes(array)))
    bundle = _make("mnist", {"root": str(tmp_path), "download": False, "cache_dir": str(tmp_path / "cache")})
    assert bundle.name == "mnist" and bundle.num_classes == 10 and bundle.input_shape == (1, 28, 28)
    assert bundle.client_indices is None
    # Independent normalisation: MNIST's published mean 0.1307 and std 0.3081.
    pixel = float(images[2, 5, 7])
    assert abs(float(bundle.train.inputs[2, 0, 5, 7]) - (pixel / 255 - 0.1307) / 0.3081) < 1e-6
    assert bundle.train.targets.tolist() == [3, 1, 4, 1] and bundle.test.targets.tolist() == [3]


@pytest.mark.skipif(Path("/usr/share/datasets/mnist").is_dir(), reason="MNIST is installed system-wide")
def test_missing_mnist_without_download_lists_system_dir_and_cache(tmp_path):
    with pytest.raises(DatasetNotFoundError) as info:
        _make("mnist", {"download": False, "cache_dir": str(tmp_path / "c")})
    message = str(info.value)
    assert str(tmp_path / "c") in message
    assert "/usr/share/datasets/mnist" in message and "data.root" in message


def test_a_root_without_the_files_is_an_error_not_a_fallback(tmp_path):
    """Issue 12, finding 9: only data.root is searched when it is set (no system copy, no cache)."""
    (tmp_path / "c").mkdir()
    with pytest.raises(DatasetNotFoundError) as info:
        _make("fmnist", {"root": str(tmp_path / "r"), "download": True, "cache_dir": str(tmp_path / "c")})
    message = str(info.value)
    assert message.startswith(f"data.root = '{tmp_path / 'r'}' does not hold the dataset")
    assert "/usr/share/datasets" not in message and str(tmp_path / "c") not in message
    assert list((tmp_path / "c").iterdir()) == []      # nothing downloaded for a root


@pytest.fixture(scope="module")
def fashion_mnist():
    if not FASHION_DIR.is_dir():
        pytest.skip("dataset-fashion-mnist is not installed")
    return _make("fmnist", {"download": False})


def test_real_fashion_mnist_loads_with_the_documented_shapes(fashion_mnist):
    bundle = fashion_mnist
    assert bundle.train.inputs.shape == (60000, 1, 28, 28) and bundle.test.inputs.shape == (10000, 1, 28, 28)
    assert bundle.train.inputs.dtype == torch.float32 and bundle.train.targets.dtype == torch.int64
    # Fashion-MNIST is class-balanced: 6,000 and 1,000 examples per class.
    assert torch.equal(torch.bincount(bundle.train.targets), torch.full((10,), 6000))
    assert torch.equal(torch.bincount(bundle.test.targets), torch.full((10,), 1000))
    # 0.2860 / 0.3530 are the training-set pixel mean and std, so the normalised set is ~N(0, 1).
    assert abs(float(bundle.train.inputs.mean())) < 5e-3 and abs(float(bundle.train.inputs.std()) - 1) < 5e-3


@pytest.mark.skipif(not FASHION_DIR.is_dir(), reason="dataset-fashion-mnist is not installed")
def test_installed_fashion_mnist_has_the_official_contents():
    # The Debian package re-gzips the files (so the .gz md5s differ from the official ones), but
    # the uncompressed bytes must match the published md5s.
    assert verify_idx_content(find_idx_files("fashion-mnist"), IDX_SOURCES["fmnist"]) == []
