"""CINIC-10 and TinyImageNet image-folder loaders (and their decoded-image cache) on tiny fixtures."""
import sys

import numpy as np
import pytest
import torch

import fedhet.data.imagefolder as imagefolder
import fedhet.data.paper_datasets  # noqa: F401  (registers the datasets)
from fedhet.core.registry import DATASETS
from fedhet.data.errors import DatasetFileError
from fedhet.data.imagefolder import (
    CINIC10_MEAN,
    CINIC10_STD,
    TINYIMAGENET_MEAN,
    TINYIMAGENET_STD,
    load_cinic10,
    load_tinyimagenet,
)
from fedhet.data.transforms import Compose

Image = pytest.importorskip("PIL.Image")

CINIC_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def write_cinic10(root, per_class=2, seed=0):
    """root/{train,valid,test}/<class>/*.png, 32x32 RGB (one greyscale file); returns the pixels per split."""
    rng = np.random.default_rng(seed)
    pixels = {}
    for split in ("train", "valid", "test"):
        pixels[split] = []
        for label, name in enumerate(CINIC_CLASSES):
            (root / split / name).mkdir(parents=True)
            for k in range(per_class):
                array = rng.integers(0, 256, size=(32, 32, 3), dtype=np.uint8)
                if split == "train" and label == 3 and k == 0:  # CINIC holds a few greyscale images
                    grey = array[:, :, 0]
                    Image.fromarray(grey).save(root / split / name / f"img{k}.png")
                    array = np.stack([grey] * 3, axis=-1)
                else:
                    Image.fromarray(array).save(root / split / name / f"cifar10-{split}-{k}.png")
                pixels[split].append((array, label))
    return pixels


def _denormalise(inputs, mean, std):
    return (inputs * torch.tensor(std).view(1, 3, 1, 1) + torch.tensor(mean).view(1, 3, 1, 1)) * 255


def test_cinic10_shapes_labels_and_exact_pixels(tmp_path):
    pixels = write_cinic10(tmp_path)
    bundle = load_cinic10(tmp_path)
    assert bundle.name == "cinic10" and bundle.num_classes == 10 and bundle.input_shape == (3, 32, 32)
    assert bundle.train.inputs.shape == (20, 3, 32, 32) and bundle.test.inputs.shape == (20, 3, 32, 32)
    assert bundle.train.targets.tolist() == [label for _, label in pixels["train"]]
    # Files are read class by class in sorted-name order; within a class by file name.
    expected = torch.stack([torch.from_numpy(array).permute(2, 0, 1) for array, _ in pixels["train"]]).float()
    order = [0, 1, 2, 3, 4, 5, 7, 6] + list(range(8, 20))  # class 3: "cifar10-train-1.png" < "img0.png"
    assert torch.allclose(_denormalise(bundle.train.inputs, CINIC10_MEAN, CINIC10_STD), expected[order], atol=1e-3)
    with_valid = load_cinic10(tmp_path, include_valid=True)
    assert with_valid.train.inputs.shape[0] == 40 and torch.equal(with_valid.train.inputs[:20], bundle.train.inputs)


def test_cache_is_reused_and_invalidated_by_file_changes(tmp_path, monkeypatch):
    write_cinic10(tmp_path / "cinic")
    cache = tmp_path / "cache"
    first = load_cinic10(tmp_path / "cinic", cache_dir=cache)
    cached_files = sorted(p.name for p in cache.iterdir())
    assert len(cached_files) == 2 and all(name.startswith("cinic10-") for name in cached_files)

    def no_decoding(*args, **kwargs):
        raise AssertionError("decoded although a valid cache exists")
    monkeypatch.setattr(imagefolder, "decode_images", no_decoding)
    second = load_cinic10(tmp_path / "cinic", cache_dir=cache)
    assert torch.equal(first.train.inputs, second.train.inputs) and torch.equal(first.test.targets, second.test.targets)

    replacement = np.zeros((32, 32, 3), np.uint8)
    Image.fromarray(replacement).save(tmp_path / "cinic" / "test" / "bird" / "cifar10-test-0.png")  # new size
    with pytest.raises(AssertionError, match="decoded although"):
        load_cinic10(tmp_path / "cinic", cache_dir=cache)


def test_damaged_cache_is_rebuilt(tmp_path):
    write_cinic10(tmp_path / "cinic")
    cache = tmp_path / "cache"
    first = load_cinic10(tmp_path / "cinic", cache_dir=cache)
    for path in cache.iterdir():
        path.write_bytes(path.read_bytes()[:100])
    with pytest.warns(UserWarning, match="rebuilding"):
        again = load_cinic10(tmp_path / "cinic", cache_dir=cache)
    assert torch.equal(first.train.inputs, again.train.inputs)


def test_worker_count_does_not_change_the_result(tmp_path):
    write_cinic10(tmp_path)
    one = load_cinic10(tmp_path, num_workers=1)
    four = load_cinic10(tmp_path, num_workers=4)
    assert torch.equal(one.train.inputs, four.train.inputs) and torch.equal(one.test.targets, four.test.targets)


def test_undecodable_and_wrong_size_images_name_the_file(tmp_path):
    write_cinic10(tmp_path)
    broken = tmp_path / "test" / "ship" / "cifar10-test-1.png"
    broken.write_bytes(broken.read_bytes()[:60])
    with pytest.raises(DatasetFileError, match=r"ship/cifar10-test-1\.png: cannot decode image"):
        load_cinic10(tmp_path)
    Image.fromarray(np.zeros((30, 32, 3), np.uint8)).save(broken)
    with pytest.raises(DatasetFileError, match=r"cifar10-test-1\.png: image is 32x30, expected 32x32"):
        load_cinic10(tmp_path)


def test_missing_or_mismatched_class_folders(tmp_path):
    with pytest.raises(DatasetFileError, match="no CINIC-10 train/ and test/"):
        load_cinic10(tmp_path)
    write_cinic10(tmp_path)
    (tmp_path / "test" / "truck").rename(tmp_path / "test" / "lorry")
    with pytest.raises(DatasetFileError, match="class folders"):
        load_cinic10(tmp_path)


def write_tinyimagenet(parent, wnids=("n01443537", "n01629819", "n01641577"), per_class=2, val=4, seed=0):
    root = parent / "tiny-imagenet-200"
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True)
    (root / "wnids.txt").write_text("\n".join(wnids) + "\n")
    for wnid in wnids:
        (root / "train" / wnid / "images").mkdir(parents=True)
        (root / "train" / wnid / f"{wnid}_boxes.txt").write_text("")
        for k in range(per_class):
            array = rng.integers(0, 256, size=(64, 64, 3), dtype=np.uint8)
            Image.fromarray(array).save(root / "train" / wnid / "images" / f"{wnid}_{k}.JPEG", format="JPEG")
    (root / "val" / "images").mkdir(parents=True)
    lines, val_labels = [], []
    for k in range(val):
        wnid = wnids[(k * 2) % len(wnids)]
        name = f"val_{k}.JPEG"
        Image.fromarray(rng.integers(0, 256, size=(64, 64), dtype=np.uint8)).save(
            root / "val" / "images" / name, format="JPEG")  # greyscale, as some val images are
        lines.append(f"{name}\t{wnid}\t0\t0\t63\t63")
        val_labels.append(wnids.index(wnid))
    (root / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    return root, val_labels


def test_tinyimagenet_shapes_labels_and_pixels(tmp_path):
    root, val_labels = write_tinyimagenet(tmp_path)
    bundle = load_tinyimagenet(tmp_path)
    assert bundle.name == "tinyimagenet" and bundle.num_classes == 3 and bundle.input_shape == (3, 64, 64)
    assert bundle.train.inputs.shape == (6, 3, 64, 64) and bundle.test.inputs.shape == (4, 3, 64, 64)
    assert bundle.train.targets.tolist() == [0, 0, 1, 1, 2, 2]
    assert bundle.test.targets.tolist() == val_labels
    # Same decoder, so the pixels match Pillow's own decoding of the file exactly (up to float rounding).
    reference = np.array(Image.open(root / "train" / "n01629819" / "images" / "n01629819_1.JPEG").convert("RGB"))
    restored = _denormalise(bundle.train.inputs, TINYIMAGENET_MEAN, TINYIMAGENET_STD)[3]
    assert torch.allclose(restored, torch.from_numpy(reference).permute(2, 0, 1).float(), atol=1e-3)
    grey = _denormalise(bundle.test.inputs, TINYIMAGENET_MEAN, TINYIMAGENET_STD)[0]
    assert torch.allclose(grey[0], grey[1], atol=1e-3) and torch.allclose(grey[0], grey[2], atol=1e-3)
    assert torch.equal(load_tinyimagenet(root).test.inputs, bundle.test.inputs)  # root itself works too


def test_tinyimagenet_bad_annotation_and_missing_layout(tmp_path):
    root, _ = write_tinyimagenet(tmp_path / "a")
    annotations = root / "val" / "val_annotations.txt"
    annotations.write_text(annotations.read_text() + "val_0.JPEG\tn99999999\t0\t0\t1\t1\n")
    with pytest.raises(DatasetFileError, match=r"val_annotations\.txt, line 5"):
        load_tinyimagenet(root)
    with pytest.raises(DatasetFileError, match=r"wnids\.txt.*tiny-imagenet-200\.zip"):
        load_tinyimagenet(tmp_path / "b")


def test_missing_pillow_gives_install_hint(tmp_path, monkeypatch):
    write_cinic10(tmp_path, per_class=1)
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(ImportError, match=r"pip install fedhet\[formats\]"):
        load_cinic10(tmp_path)


def test_registered_image_folder_datasets(tmp_path):
    write_cinic10(tmp_path / "cinic", per_class=1)
    write_tinyimagenet(tmp_path / "tiny")
    cinic = DATASETS.get("cinic10")
    bundle = cinic.factory(cinic.options_cls(root=str(tmp_path / "cinic"), cache_dir=str(tmp_path / "cache")), seed=0)
    assert isinstance(bundle.train_transform, Compose) and any((tmp_path / "cache").iterdir())
    tiny = DATASETS.get("tinyimagenet")
    bundle = tiny.factory(tiny.options_cls(root=str(tmp_path / "tiny"), augment=False), seed=0)
    assert bundle.train_transform is None and bundle.num_classes == 3
