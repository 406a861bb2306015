"""CIFAR-10/100 python-pickle loaders on tiny fixtures written in the official format."""
import io
import pickle
import struct
import tarfile

import numpy as np
import pytest
import torch

import fedhet.data.paper_datasets  # noqa: F401  (registers the datasets)
from fedhet.core.options import ConfigError
from fedhet.core.registry import DATASETS
from fedhet.data.cifar import (
    CIFAR10_MEAN,
    CIFAR10_STD,
    CIFAR100_MEAN,
    CIFAR100_STD,
    load_cifar10,
    load_cifar100,
    unpickle_batch,
)
from fedhet.data.errors import DatasetFileError
from fedhet.data.transforms import Compose, RandomCrop, RandomHorizontalFlip

PER_BATCH = 2


def _short_string(value: bytes) -> bytes:  # Python 2 ``str``: SHORT_BINSTRING
    return b"U" + bytes([len(value)]) + value


def _int(value: int) -> bytes:
    return b"K" + bytes([value]) if 0 <= value < 256 else b"J" + struct.pack("<i", value)


def py2_pickle_batch(images: np.ndarray, labels: list[int]) -> bytes:
    """A pickle as Python 2's cPickle (protocol 2) wrote the official batches: str keys, numpy.core names."""
    rows, columns = images.shape
    dtype = (b"cnumpy\ndtype\n" + _short_string(b"u1") + _int(0) + _int(1) + b"\x87R"
             + b"(" + _int(3) + _short_string(b"|") + b"NNN" + _int(-1) + _int(-1) + _int(0) + b"tb")
    array = (b"cnumpy.core.multiarray\n_reconstruct\n" + b"cnumpy\nndarray\n" + _int(0) + b"\x85"
             + _short_string(b"b") + b"\x87R"
             + b"(" + _int(1) + _int(rows) + _int(columns) + b"\x86" + dtype + b"\x89"
             + b"T" + struct.pack("<i", images.nbytes) + images.tobytes() + b"tb")
    label_list = b"](" + b"".join(_int(v) for v in labels) + b"e"
    return (b"\x80\x02}(" + _short_string(b"data") + array + _short_string(b"labels") + label_list
            + _short_string(b"batch_label") + _short_string(b"training batch 1 of 5") + b"u.")


def _random_batch(rng, count, num_classes):
    return rng.integers(0, 256, size=(count, 3072), dtype=np.uint8), rng.integers(0, num_classes, size=count).tolist()


def write_cifar10(directory, seed=0):
    """cifar-10-batches-py/ with 5 training batches of 2 images, a test batch of 3, and batches.meta."""
    rng = np.random.default_rng(seed)
    folder = directory / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    train_images, train_labels = [], []
    for k in range(1, 6):
        images, labels = _random_batch(rng, PER_BATCH, 10)
        batch = {b"batch_label": f"training batch {k} of 5".encode(), b"labels": labels, b"data": images,
                 b"filenames": [b"x.png"] * PER_BATCH}
        (folder / f"data_batch_{k}").write_bytes(pickle.dumps(batch, protocol=2))
        train_images.append(images)
        train_labels += labels
    test_images, test_labels = _random_batch(rng, 3, 10)
    (folder / "test_batch").write_bytes(pickle.dumps({b"data": test_images, b"labels": test_labels}, protocol=2))
    meta = {b"label_names": [f"class{i}".encode() for i in range(10)], b"num_vis": 3072}
    (folder / "batches.meta").write_bytes(pickle.dumps(meta, protocol=2))
    return folder, (np.concatenate(train_images), train_labels), (test_images, test_labels)


def write_cifar100(directory, seed=1):
    rng = np.random.default_rng(seed)
    folder = directory / "cifar-100-python"
    folder.mkdir(parents=True)
    splits = {}
    for name, count in (("train", 4), ("test", 3)):
        images = rng.integers(0, 256, size=(count, 3072), dtype=np.uint8)
        fine = rng.integers(0, 100, size=count).tolist()
        coarse = [f // 5 for f in fine]
        (folder / name).write_bytes(pickle.dumps({b"data": images, b"fine_labels": fine, b"coarse_labels": coarse},
                                                 protocol=4))
        splits[name] = (images, fine, coarse)
    meta = {b"fine_label_names": [b"f%d" % i for i in range(100)], b"coarse_label_names": [b"c%d" % i for i in range(20)]}
    (folder / "meta").write_bytes(pickle.dumps(meta, protocol=2))
    return folder, splits


def _denormalise(inputs, mean, std):
    return (inputs * torch.tensor(std).view(1, 3, 1, 1) + torch.tensor(mean).view(1, 3, 1, 1)) * 255


def test_py2_style_pickle_is_read_like_the_official_files():
    rng = np.random.default_rng(0)
    images, labels = _random_batch(rng, 3, 10)
    blob = py2_pickle_batch(images, labels)
    reference = pickle.loads(blob, encoding="bytes")  # the unrestricted loader: the blob is valid
    batch = unpickle_batch(blob, "fixture")
    assert np.array_equal(batch[b"data"], images) and np.array_equal(reference[b"data"], images)
    assert batch[b"labels"] == labels and batch[b"batch_label"] == b"training batch 1 of 5"


def test_cifar10_directory_shapes_labels_and_normalisation(tmp_path):
    folder, (train_images, train_labels), (test_images, test_labels) = write_cifar10(tmp_path)
    bundle = load_cifar10(tmp_path)
    assert bundle.name == "cifar10" and bundle.num_classes == 10 and bundle.input_shape == (3, 32, 32)
    assert bundle.train.inputs.shape == (10, 3, 32, 32) and bundle.train.inputs.dtype == torch.float32
    assert bundle.test.inputs.shape == (3, 3, 32, 32)
    assert bundle.train.targets.dtype == torch.int64 and bundle.train.targets.tolist() == train_labels
    assert bundle.test.targets.tolist() == test_labels
    # Row layout: 1024 red values, then green, then blue, each plane row-major.
    raw = train_images[1]
    pixels = _denormalise(bundle.train.inputs, CIFAR10_MEAN, CIFAR10_STD)[1]
    assert pixels[0, 0, 1].round().item() == raw[1]          # red, row 0, column 1
    assert pixels[0, 1, 0].round().item() == raw[32]         # red, row 1, column 0
    assert pixels[1, 0, 0].round().item() == raw[1024]       # green, row 0, column 0
    assert pixels[2, 31, 31].round().item() == raw[3071]     # blue, last pixel
    expected = torch.from_numpy(np.concatenate([train_images]).reshape(-1, 3, 32, 32)).float()
    assert torch.allclose(_denormalise(bundle.train.inputs, CIFAR10_MEAN, CIFAR10_STD), expected, atol=1e-3)
    assert torch.equal(load_cifar10(folder).train.inputs, bundle.train.inputs)  # the folder itself works too


def test_cifar10_official_py2_batches(tmp_path):
    folder, _, _ = write_cifar10(tmp_path)
    rng = np.random.default_rng(5)
    images, labels = _random_batch(rng, PER_BATCH, 10)
    (folder / "data_batch_3").write_bytes(py2_pickle_batch(images, labels))
    bundle = load_cifar10(tmp_path)
    expected = torch.from_numpy(images.reshape(-1, 3, 32, 32)).float()
    assert torch.allclose(_denormalise(bundle.train.inputs[4:6], CIFAR10_MEAN, CIFAR10_STD), expected, atol=1e-3)
    assert bundle.train.targets[4:6].tolist() == labels


def test_cifar10_archive_gives_the_same_data(tmp_path):
    source = tmp_path / "extracted"
    folder, _, _ = write_cifar10(source)
    archive_dir = tmp_path / "archive"
    archive_dir.mkdir()
    archive = archive_dir / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname="cifar-10-batches-py")
    from_dir = load_cifar10(source)
    for root in (archive, archive_dir):
        from_archive = load_cifar10(root)
        assert torch.equal(from_archive.train.inputs, from_dir.train.inputs)
        assert torch.equal(from_archive.test.targets, from_dir.test.targets)


def test_cifar100_fine_and_coarse(tmp_path):
    _, splits = write_cifar100(tmp_path)
    fine = load_cifar100(tmp_path)
    coarse = load_cifar100(tmp_path, label_mode="coarse")
    assert fine.num_classes == 100 and coarse.num_classes == 20
    assert fine.train.targets.tolist() == splits["train"][1] and coarse.test.targets.tolist() == splits["test"][2]
    expected = torch.from_numpy(splits["test"][0].reshape(-1, 3, 32, 32)).float()
    assert torch.allclose(_denormalise(fine.test.inputs, CIFAR100_MEAN, CIFAR100_STD), expected, atol=1e-3)
    with pytest.raises(ValueError, match="label_mode"):
        load_cifar100(tmp_path, label_mode="medium")


def test_truncated_batch_names_the_file(tmp_path):
    folder, _, _ = write_cifar10(tmp_path)
    blob = (folder / "data_batch_3").read_bytes()
    (folder / "data_batch_3").write_bytes(blob[: len(blob) // 2])
    with pytest.raises(DatasetFileError, match="data_batch_3"):
        load_cifar10(tmp_path)


def test_missing_key_bad_labels_and_missing_batch(tmp_path):
    folder, _, _ = write_cifar10(tmp_path)
    good = (folder / "test_batch").read_bytes()
    (folder / "test_batch").write_bytes(pickle.dumps({b"labels": [0]}, protocol=2))
    with pytest.raises(DatasetFileError, match=r"test_batch: missing key b'data'"):
        load_cifar10(tmp_path)
    (folder / "test_batch").write_bytes(pickle.dumps({b"data": np.zeros((1, 3072), np.uint8), b"labels": [10]}))
    with pytest.raises(DatasetFileError, match=r"test_batch.*outside 0\.\.9"):
        load_cifar10(tmp_path)
    (folder / "test_batch").write_bytes(good)
    (folder / "data_batch_5").unlink()
    with pytest.raises(DatasetFileError, match="data_batch_5: missing"):
        load_cifar10(tmp_path)


class _Exploit:
    def __reduce__(self):
        import os
        return (os.system, ("true",))


def test_pickle_naming_other_code_is_refused(tmp_path):
    folder, _, _ = write_cifar10(tmp_path)
    (folder / "data_batch_1").write_bytes(pickle.dumps({b"data": _Exploit()}, protocol=2))
    with pytest.raises(DatasetFileError, match=r"data_batch_1: the pickle refers to (posix|os|nt)\.system"):
        load_cifar10(tmp_path)


def test_truncated_archive_and_missing_root(tmp_path):
    archive = tmp_path / "cifar-10-python.tar.gz"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("cifar-10-batches-py/test_batch")
        payload = b"x" * 50000
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    archive.write_bytes(buffer.getvalue()[:200])
    with pytest.raises(DatasetFileError, match="cifar-10-python.tar.gz"):
        load_cifar10(archive)
    with pytest.raises(DatasetFileError, match="cifar-10-batches-py"):
        load_cifar10(tmp_path / "nowhere")


def test_registered_factories_set_the_paper_augmentation(tmp_path):
    write_cifar10(tmp_path / "c10")
    write_cifar100(tmp_path / "c100")
    entry = DATASETS.get("cifar10")
    bundle = entry.factory(entry.options_cls(root=str(tmp_path / "c10")), seed=0)
    assert isinstance(bundle.train_transform, Compose)
    crop, flip = bundle.train_transform.transforms
    assert isinstance(crop, RandomCrop) and crop.padding == 4 and isinstance(flip, RandomHorizontalFlip)
    # The crop pads with normalised black, i.e. what torchvision's zero padding becomes after Normalize.
    assert crop.fill == pytest.approx(tuple(-m / s for m, s in zip(CIFAR10_MEAN, CIFAR10_STD)))
    out = bundle.train_transform(bundle.train.inputs, torch.Generator().manual_seed(0))
    assert out.shape == bundle.train.inputs.shape
    plain = entry.factory(entry.options_cls(root=str(tmp_path / "c10"), augment=False), seed=0)
    assert plain.train_transform is None
    entry100 = DATASETS.get("cifar100")
    coarse = entry100.factory(entry100.options_cls(root=str(tmp_path / "c100"), label_mode="coarse"), seed=0)
    assert coarse.num_classes == 20


def test_missing_root_option_names_data_root_and_layout():
    entry = DATASETS.get("cifar10")
    with pytest.raises(ConfigError, match=r"data\.root.*cifar-10-batches-py.*place the official files"):
        entry.factory(entry.options_cls(), seed=0)


def _nested_shared_list(depth=9, width=10):
    """A list nested ``depth`` deep, ``width`` wide, every level one shared object: a pickle of a few
    hundred bytes that np.asarray expands into width ** depth (1e9) elements."""
    level = [0]
    for _ in range(depth):
        level = [level] * width
    return level


@pytest.mark.parametrize("key", [b"data", b"labels"])
def test_a_tiny_nested_list_pickle_fails_fast_without_allocating(tmp_path, key):
    import time
    import tracemalloc

    folder, _train, _test = write_cifar10(tmp_path)
    images, labels = _random_batch(np.random.default_rng(5), PER_BATCH, 10)
    batch = {b"data": images, b"labels": labels}
    batch[key] = _nested_shared_list()
    assert len(pickle.dumps(batch[key], protocol=2)) < 300          # the bomb itself is tiny
    (folder / "data_batch_1").write_bytes(pickle.dumps(batch, protocol=2))
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(DatasetFileError, match=rf"data_batch_1: {key!r} must be"):
            load_cifar10(tmp_path)
        elapsed = time.perf_counter() - started
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The bad path took 13 s and 3.5 GB; the checks come before any conversion now (the bound is
    # loose because the machine is shared).
    assert elapsed < 2.0 and peak < 50 * 2**20


def test_cifar_bundle_lists_the_files_it_read(tmp_path):
    folder, _train, _test = write_cifar10(tmp_path)
    files = load_cifar10(tmp_path).source_files
    assert sorted(files) == sorted(str(folder / name) for name in
                                   [f"data_batch_{k}" for k in range(1, 6)] + ["test_batch", "batches.meta"])
