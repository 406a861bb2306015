"""FEMNIST LEAF-JSON loader and its natural per-writer partition on tiny fixtures."""
import json

import numpy as np
import pytest
import torch

import fedhet.data.paper_datasets  # noqa: F401  (registers the datasets)
from fedhet.core.registry import DATASETS
from fedhet.data.errors import DatasetFileError
from fedhet.data.femnist import load_femnist, read_leaf_json


def _writer(rng, count):
    pixels = rng.random((count, 784)).round(3)
    labels = rng.integers(0, 62, size=count)
    return {"x": pixels.tolist(), "y": labels.tolist()}


def write_leaf_file(path, users):
    """One LEAF JSON file: users, num_samples, user_data {user: {x, y}} (as preprocess.sh writes)."""
    content = {"users": list(users), "num_samples": [len(data["y"]) for data in users.values()],
               "user_data": users}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(content))


def write_femnist(root, seed=0):
    rng = np.random.default_rng(seed)
    train = {"f0002_01": _writer(rng, 3), "f0001_03": _writer(rng, 2), "f0000_10": _writer(rng, 4)}
    test = {"f0002_01": _writer(rng, 1), "f0000_10": _writer(rng, 2)}
    # LEAF splits writers over several files; the writer order must not depend on that split.
    write_leaf_file(root / "train" / "all_data_0_niid_0_keep_0_train_9.json",
                    {k: train[k] for k in ("f0002_01", "f0001_03")})
    write_leaf_file(root / "train" / "all_data_1_niid_0_keep_0_train_9.json", {"f0000_10": train["f0000_10"]})
    write_leaf_file(root / "test" / "all_data_0_niid_0_keep_0_test_9.json", test)
    return train, test


def test_femnist_shapes_labels_and_writer_partition(tmp_path):
    train, test = write_femnist(tmp_path / "data")
    bundle = load_femnist(tmp_path)  # the parent of data/ works as well as data/ itself
    assert bundle.name == "femnist" and bundle.num_classes == 62 and bundle.input_shape == (1, 28, 28)
    assert bundle.train.inputs.shape == (9, 1, 28, 28) and bundle.train.inputs.dtype == torch.float32
    assert bundle.test.inputs.shape == (3, 1, 28, 28) and bundle.test.targets.dtype == torch.int64
    writers = sorted(train)  # f0000_10, f0001_03, f0002_01
    assert [len(indices) for indices in bundle.client_indices] == [4, 2, 3]
    assert torch.equal(torch.cat(bundle.client_indices), torch.arange(9))
    for indices, writer in zip(bundle.client_indices, writers):
        pixels = torch.tensor(train[writer]["x"], dtype=torch.float32).view(-1, 1, 28, 28)
        assert torch.equal(bundle.train.inputs[indices], pixels)  # no inversion, no standardisation
        assert bundle.train.targets[indices].tolist() == train[writer]["y"]
        assert bundle.client_indices[0].dtype == torch.int64
    # Row-major 28 x 28: flat index 28 * r + c is pixel (r, c).
    assert bundle.train.inputs[0, 0, 2, 5].item() == pytest.approx(train["f0000_10"]["x"][0][2 * 28 + 5])
    assert bundle.test.targets.tolist() == test["f0000_10"]["y"] + test["f0002_01"]["y"]
    inverted = load_femnist(tmp_path / "data", invert=True)
    assert torch.allclose(inverted.train.inputs, 1.0 - bundle.train.inputs)


def test_missing_user_data_names_the_file(tmp_path):
    write_femnist(tmp_path)
    path = tmp_path / "train" / "all_data_1_niid_0_keep_0_train_9.json"
    content = json.loads(path.read_text())
    del content["user_data"]
    path.write_text(json.dumps(content))
    with pytest.raises(DatasetFileError, match=r"all_data_1_niid_0_keep_0_train_9\.json: missing key 'user_data'"):
        load_femnist(tmp_path)


def test_truncated_json_count_mismatch_bad_labels(tmp_path):
    write_femnist(tmp_path)
    path = tmp_path / "test" / "all_data_0_niid_0_keep_0_test_9.json"
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    with pytest.raises(DatasetFileError, match=r"test_9\.json: not a readable JSON file"):
        read_leaf_json(path)
    rng = np.random.default_rng(1)
    writer = _writer(rng, 2)
    write_leaf_file(path, {"u": writer})
    content = json.loads(path.read_text())
    content["num_samples"] = [3]
    path.write_text(json.dumps(content))
    with pytest.raises(DatasetFileError, match=r"user_data\['u'\]: num_samples says 3, found 2"):
        read_leaf_json(path)
    write_leaf_file(path, {"u": {"x": writer["x"], "y": [62, 0]}})
    with pytest.raises(DatasetFileError, match=r"'y' must be in 0\.\.61"):
        read_leaf_json(path)
    write_leaf_file(path, {"u": {"x": [row[:700] for row in writer["x"]], "y": [1, 0]}})
    with pytest.raises(DatasetFileError, match=r"'x' must be \[m, 784\]"):
        read_leaf_json(path)


def test_duplicate_writer_and_missing_layout(tmp_path):
    train, _ = write_femnist(tmp_path)
    write_leaf_file(tmp_path / "train" / "extra.json", {"f0001_03": train["f0001_03"]})
    with pytest.raises(DatasetFileError, match="'f0001_03' also appears in"):
        load_femnist(tmp_path)
    with pytest.raises(DatasetFileError, match="no FEMNIST train/ and test/"):
        load_femnist(tmp_path / "elsewhere")


def test_registered_femnist(tmp_path):
    write_femnist(tmp_path)
    entry = DATASETS.get("femnist")
    bundle = entry.factory(entry.options_cls(root=str(tmp_path)), seed=0)
    assert len(bundle.client_indices) == 3 and bundle.train_transform is None


def test_femnist_lists_the_json_files_it_read(tmp_path):
    write_femnist(tmp_path / "data")
    files = load_femnist(tmp_path).source_files
    assert [f.split("/data/", 1)[1] for f in files] == [
        "train/all_data_0_niid_0_keep_0_train_9.json", "train/all_data_1_niid_0_keep_0_train_9.json",
        "test/all_data_0_niid_0_keep_0_test_9.json"]
