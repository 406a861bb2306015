"""data.name = "hf": a DatasetDict saved with save_to_disk in the test (image, text, numbers), read
back without any download, and the errors a user meets."""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from fedhet.config.schema import load_config
from fedhet.core.options import ConfigError
from fedhet.data.errors import DatasetFileError
from fedhet.data.hf_disk import DatasetsNotInstalledError, HfDiskOptions, load_hf_disk

datasets = pytest.importorskip("datasets")
PIL = pytest.importorskip("PIL.Image")


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    # Never download: the loader must not need the network (datasets honours these).
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _image_dir(tmp_path, *, mode="L", size=(6, 5)):
    rng = np.random.default_rng(0)

    def split(n):
        shape = (size[1], size[0]) if mode == "L" else (size[1], size[0], 3)
        images = [PIL.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode=mode) for _ in range(n)]
        labels = [int(i % 3) for i in range(n)]
        writers = [f"w{i % 4}" for i in range(n)]
        features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b", "c"]),
                                      "writer": datasets.Value("string")})
        return datasets.Dataset.from_dict({"img": images, "label": labels, "writer": writers}, features=features)

    path = tmp_path / "images"
    datasets.DatasetDict({"train": split(24), "test": split(9)}).save_to_disk(str(path))
    return path


def test_images_become_normalised_tensors_with_the_class_label(tmp_path):
    path = _image_dir(tmp_path)
    bundle = load_hf_disk(HfDiskOptions(path=str(path), input="img"))
    assert bundle.input_shape == (1, 5, 6) and bundle.num_classes == 3
    assert bundle.train.inputs.dtype == torch.float32 and bundle.train.inputs.shape == (24, 1, 5, 6)
    assert bundle.train.targets.tolist() == [i % 3 for i in range(24)]
    # Normalised by the training split's own statistics: mean 0, std 1 per channel.
    assert abs(float(bundle.train.inputs.mean())) < 1e-5
    assert abs(float(bundle.train.inputs.std()) - 1) < 1e-3
    # (x - mean) / std with the training pixels' own mean and std: differences scale by 1 / std.
    saved = datasets.load_from_disk(str(path))["train"]["img"]
    pixels = torch.tensor(np.stack([np.asarray(image) for image in saved]), dtype=torch.float64) / 255
    expected = (pixels[0] - pixels[1]) / pixels.std()
    assert torch.allclose(bundle.train.inputs[0, 0].double() - bundle.train.inputs[1, 0].double(), expected, atol=1e-5)
    assert bundle.source_files and all(str(path) in f for f in bundle.source_files)


def test_rgb_images_and_a_client_column_give_a_natural_partition(tmp_path):
    bundle = load_hf_disk(HfDiskOptions(path=str(_image_dir(tmp_path, mode="RGB")), input="img",
                                        client_column="writer"))
    assert bundle.input_shape == (3, 5, 6)
    assert [idx.tolist() for idx in bundle.client_indices] == [list(range(w, 24, 4)) for w in range(4)]


def test_a_run_trains_on_a_saved_image_dataset(tmp_path):
    from fedhet.engine.runner import run_experiment

    path = _image_dir(tmp_path)
    config = load_config(None, ["data.name=hf", f"data.path={path}", "data.input=img", "model.name=logreg",
                                "partition.name=iid", "partition.num_clients=4", "participation.clients_per_round=2",
                                "run.rounds=2", "run.progress=false", f"run.out_dir={tmp_path / 'runs'}",
                                "run.name=hf"])
    result = run_experiment(config)
    assert [r["round"] for r in result.history][-1] == 2 and 0 <= result["final_accuracy"] <= 1


def test_text_with_string_labels_is_tokenised_like_ag_news(tmp_path):
    train = datasets.Dataset.from_dict({"text": ["good movie", "bad movie", "good good", "awful bad"],
                                        "sentiment": ["pos", "neg", "pos", "neg"]})
    test = datasets.Dataset.from_dict({"text": ["good", "terrible"], "sentiment": ["pos", "neg"]})
    path = tmp_path / "text"
    datasets.DatasetDict({"train": train, "test": test}).save_to_disk(str(path))
    bundle = load_hf_disk(HfDiskOptions(path=str(path), label="sentiment", max_length=3))
    assert bundle.num_classes == 2 and bundle.train.targets.tolist() == [1, 0, 1, 0]   # neg = 0, pos = 1
    assert bundle.input_shape == (3,) and bundle.train.inputs.dtype == torch.int64
    from fedhet.data.agnews import WordTokenizer
    expected = WordTokenizer.fit(train["text"], 30000).encode(test["text"], 3)
    assert torch.equal(bundle.test.inputs, expected)


def test_numeric_features_and_integer_labels(tmp_path):
    train = datasets.Dataset.from_dict({"x": [[0.0, 1.0], [1.0, 0.5], [2.0, 2.0]], "label": [0, 2, 1]})
    test = datasets.Dataset.from_dict({"x": [[0.5, 0.5]], "label": [2]})
    path = tmp_path / "numbers"
    datasets.DatasetDict({"train": train, "test": test}).save_to_disk(str(path))
    bundle = load_hf_disk(HfDiskOptions(path=str(path)))
    assert bundle.num_classes == 3 and bundle.input_shape == (2,)
    assert torch.equal(bundle.train.inputs, torch.tensor([[0.0, 1.0], [1.0, 0.5], [2.0, 2.0]]))


def test_user_errors_are_named(tmp_path, monkeypatch):
    path = _image_dir(tmp_path)
    with pytest.raises(ConfigError, match="data.path"):
        load_hf_disk(HfDiskOptions())
    with pytest.raises(DatasetFileError, match="no such directory"):
        load_hf_disk(HfDiskOptions(path=str(tmp_path / "missing")))
    with pytest.raises(ConfigError, match="name the input column.*img, writer"):
        load_hf_disk(HfDiskOptions(path=str(path)))
    with pytest.raises(ConfigError, match="no such split in the saved dataset; it has: test, train"):
        load_hf_disk(HfDiskOptions(path=str(path), input="img", test_split="validation"))
    with pytest.raises(ConfigError, match="data.label = 'y'"):
        load_hf_disk(HfDiskOptions(path=str(path), input="img", label="y"))
    single = tmp_path / "single"
    datasets.Dataset.from_dict({"x": [1.0], "label": [0]}).save_to_disk(str(single))
    with pytest.raises(DatasetFileError, match="not a DatasetDict"):
        load_hf_disk(HfDiskOptions(path=str(single)))
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(DatasetsNotInstalledError, match="pip install fedhet\\[hf\\]"):
        load_hf_disk(HfDiskOptions(path=str(path), input="img"))
