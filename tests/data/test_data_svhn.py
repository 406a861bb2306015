"""SVHN .mat loader on tiny fixtures written with scipy.io.savemat in the official layout."""
import sys

import numpy as np
import pytest
import torch

import fedhet.data.paper_datasets  # noqa: F401  (registers the datasets)
from fedhet.core.registry import DATASETS
from fedhet.data.errors import DatasetFileError
from fedhet.data.svhn import SVHN_MEAN, SVHN_STD, load_svhn, read_svhn_mat
from fedhet.data.transforms import RandomCrop

scipy_io = pytest.importorskip("scipy.io")


def write_svhn_mat(path, labels, seed=0):
    """X uint8 [32, 32, 3, n] and y [n, 1] (1..10, 10 = digit 0), as in train_32x32.mat."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(32, 32, 3, len(labels)), dtype=np.uint8)
    scipy_io.savemat(str(path), {"X": images, "y": np.array(labels, dtype=np.uint8).reshape(-1, 1)})
    return images


def _denormalise(inputs):
    return (inputs * torch.tensor(SVHN_STD).view(1, 3, 1, 1) + torch.tensor(SVHN_MEAN).view(1, 3, 1, 1)) * 255


def test_svhn_shapes_labels_layout_and_normalisation(tmp_path):
    train_x = write_svhn_mat(tmp_path / "train_32x32.mat", [10, 1, 9, 10, 5])
    write_svhn_mat(tmp_path / "test_32x32.mat", [3, 10], seed=1)
    bundle = load_svhn(tmp_path)
    assert bundle.name == "svhn" and bundle.num_classes == 10 and bundle.input_shape == (3, 32, 32)
    assert bundle.train.inputs.shape == (5, 3, 32, 32) and bundle.train.inputs.dtype == torch.float32
    assert bundle.train.targets.tolist() == [0, 1, 9, 0, 5]  # label 10 is the digit 0
    assert bundle.test.targets.tolist() == [3, 0] and bundle.test.targets.dtype == torch.int64
    # X[h, w, c, i] is image i, channel c, row h, column w.
    expected = torch.from_numpy(train_x).permute(3, 2, 0, 1).float()
    assert torch.allclose(_denormalise(bundle.train.inputs), expected, atol=1e-3)
    assert _denormalise(bundle.train.inputs)[2, 1, 4, 7].round().item() == train_x[4, 7, 1, 2]


def test_svhn_include_extra(tmp_path):
    write_svhn_mat(tmp_path / "train_32x32.mat", [1, 2])
    write_svhn_mat(tmp_path / "test_32x32.mat", [3])
    write_svhn_mat(tmp_path / "extra_32x32.mat", [4, 10, 6], seed=2)
    bundle = load_svhn(tmp_path, include_extra=True)
    assert bundle.train.targets.tolist() == [1, 2, 4, 0, 6]


def test_mat_missing_x_names_file_and_variable(tmp_path):
    scipy_io.savemat(str(tmp_path / "train_32x32.mat"), {"y": np.ones((2, 1), np.uint8)})
    with pytest.raises(DatasetFileError, match=r"train_32x32\.mat: has no variable 'X'"):
        read_svhn_mat(tmp_path / "train_32x32.mat")


def test_garbage_and_bad_labels_and_missing_file(tmp_path):
    (tmp_path / "test_32x32.mat").write_bytes(b"this is not a MATLAB file at all" * 10)
    with pytest.raises(DatasetFileError, match=r"test_32x32\.mat: not a readable MATLAB file"):
        read_svhn_mat(tmp_path / "test_32x32.mat")
    write_svhn_mat(tmp_path / "train_32x32.mat", [0, 3])  # 0 is not an SVHN label
    with pytest.raises(DatasetFileError, match=r"train_32x32\.mat: y must be in 1\.\.10"):
        read_svhn_mat(tmp_path / "train_32x32.mat")
    with pytest.raises(DatasetFileError, match=r"extra_32x32\.mat: missing"):
        read_svhn_mat(tmp_path / "extra_32x32.mat")


def test_wrong_image_shape(tmp_path):
    scipy_io.savemat(str(tmp_path / "x.mat"), {"X": np.zeros((28, 28, 1, 2), np.uint8), "y": np.ones((2, 1))})
    with pytest.raises(DatasetFileError, match=r"X must be uint8 \[32, 32, 3, n\]"):
        read_svhn_mat(tmp_path / "x.mat")


def test_missing_scipy_gives_install_hint(tmp_path, monkeypatch):
    write_svhn_mat(tmp_path / "train_32x32.mat", [1])
    monkeypatch.setitem(sys.modules, "scipy.io", None)
    with pytest.raises(ImportError, match=r"pip install fedhet\[formats\]"):
        read_svhn_mat(tmp_path / "train_32x32.mat")


def test_registered_svhn_crops_but_never_flips(tmp_path):
    write_svhn_mat(tmp_path / "train_32x32.mat", [1, 2])
    write_svhn_mat(tmp_path / "test_32x32.mat", [3])
    entry = DATASETS.get("svhn")
    bundle = entry.factory(entry.options_cls(root=str(tmp_path)), seed=0)
    assert isinstance(bundle.train_transform, RandomCrop) and bundle.train_transform.padding == 4
