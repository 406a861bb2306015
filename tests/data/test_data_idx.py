"""IDX reading/writing and locating on fixture files written in the official format."""
import gzip
from pathlib import Path

import numpy as np
import pytest
import torch

from fedhet.data.errors import DatasetFileError
from fedhet.data.idx import IDX_FILE_STEMS, DatasetNotFoundError, find_idx_files, read_idx, read_idx_split, write_idx

FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")


def _images_and_labels(count=7, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (count, 28, 28), dtype=np.uint8), rng.integers(0, 10, count, dtype=np.uint8)


def _write_release(directory: Path, make_idx_bytes, *, gz: bool, count=7) -> tuple[np.ndarray, np.ndarray]:
    directory.mkdir(parents=True, exist_ok=True)
    images, labels = _images_and_labels(count)
    for stem, array in zip(IDX_FILE_STEMS, (images, labels, images[:3], labels[:3])):
        data = make_idx_bytes(array)
        if gz:
            (directory / f"{stem}.gz").write_bytes(gzip.compress(data))
        else:
            (directory / stem).write_bytes(data)
    return images, labels


@pytest.mark.parametrize("gz", [False, True])
def test_round_trip_of_hand_written_images_and_labels(tmp_path, make_idx_bytes, gz):
    images, labels = _images_and_labels()
    suffix = ".gz" if gz else ""
    for name, array in (("images", images), ("labels", labels)):
        data = make_idx_bytes(array)
        (tmp_path / f"{name}{suffix}").write_bytes(gzip.compress(data) if gz else data)
    read_images = read_idx(tmp_path / f"images{suffix}")
    read_labels = read_idx(tmp_path / f"labels{suffix}")
    assert read_images.dtype == torch.uint8 and read_images.shape == (7, 28, 28)
    assert torch.equal(read_images, torch.from_numpy(images))
    assert torch.equal(read_labels, torch.from_numpy(labels))


def test_header_layout_is_big_endian(tmp_path):
    # 0x0B = int16, one dimension of size 2, values 258 = 0x0102 and -2 = 0xFFFE.
    (tmp_path / "x").write_bytes(bytes([0, 0, 0x0B, 1, 0, 0, 0, 2, 0x01, 0x02, 0xFF, 0xFE]))
    assert read_idx(tmp_path / "x").tolist() == [258, -2]


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "int32", "float32", "float64"])
def test_write_idx_matches_the_hand_written_bytes(tmp_path, make_idx_bytes, dtype):
    array = (np.arange(24).reshape(2, 3, 4) - 5).astype(dtype)
    write_idx(tmp_path / "a.idx", array)
    write_idx(tmp_path / "a.idx.gz", torch.from_numpy(array))
    assert (tmp_path / "a.idx").read_bytes() == make_idx_bytes(array)
    assert gzip.decompress((tmp_path / "a.idx.gz").read_bytes()) == make_idx_bytes(array)
    assert np.array_equal(read_idx(tmp_path / "a.idx.gz").numpy(), array)


def test_write_idx_refuses_unsupported_dtypes(tmp_path):
    with pytest.raises(ValueError, match="int64"):
        write_idx(tmp_path / "x", np.zeros(3, dtype=np.int64))


def test_truncated_payload_names_file_and_byte_counts(tmp_path, make_idx_bytes):
    images, _ = _images_and_labels()
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(make_idx_bytes(images)[:-100])
    with pytest.raises(DatasetFileError) as info:
        read_idx(path)
    message = str(info.value)
    assert str(path) in message and "truncated" in message
    assert str(7 * 28 * 28) in message and str(7 * 28 * 28 - 100) in message


def test_trailing_bytes_are_an_error(tmp_path, make_idx_bytes):
    path = tmp_path / "labels"
    path.write_bytes(make_idx_bytes(np.arange(5, dtype=np.uint8)) + b"\0")
    with pytest.raises(DatasetFileError, match="trailing"):
        read_idx(path)


def test_truncated_gzip_names_file(tmp_path, make_idx_bytes):
    images, _ = _images_and_labels()
    path = tmp_path / "t10k-images-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(make_idx_bytes(images))[:-50])
    with pytest.raises(DatasetFileError) as info:
        read_idx(path)
    assert str(path) in str(info.value) and "gzip" in str(info.value)


def test_not_gzip_data_in_gz_file(tmp_path, make_idx_bytes):
    path = tmp_path / "labels.gz"
    path.write_bytes(make_idx_bytes(np.arange(5, dtype=np.uint8)))
    with pytest.raises(DatasetFileError, match="gzip"):
        read_idx(path)


@pytest.mark.parametrize("header, fragment", [
    (bytes([1, 0, 8, 1, 0, 0, 0, 1, 5]), "magic"),
    (bytes([0, 0, 0x0A, 1, 0, 0, 0, 1, 5]), "type code 0x0A"),
    (bytes([0, 0, 8, 0]), "0 dimensions"),
    (bytes([0, 0, 8, 3, 0, 0, 0, 1]), "truncated header"),
    (bytes([0, 0]), "fewer than the 4-byte magic"),
])
def test_malformed_headers(tmp_path, header, fragment):
    path = tmp_path / "bad"
    path.write_bytes(header)
    with pytest.raises(DatasetFileError) as info:
        read_idx(path)
    assert fragment in str(info.value) and str(path) in str(info.value)


def test_missing_file_is_a_dataset_file_error(tmp_path):
    with pytest.raises(DatasetFileError, match="cannot read"):
        read_idx(tmp_path / "absent")


def test_read_idx_split_checks_agreement(tmp_path, make_idx_bytes):
    images, labels = _images_and_labels()
    (tmp_path / "img").write_bytes(make_idx_bytes(images))
    (tmp_path / "lab").write_bytes(make_idx_bytes(labels[:5]))
    with pytest.raises(DatasetFileError, match="5 labels for 7 images"):
        read_idx_split(tmp_path / "img", tmp_path / "lab")
    (tmp_path / "lab").write_bytes(make_idx_bytes(np.full(7, 12, dtype=np.uint8)))
    with pytest.raises(DatasetFileError, match="expected 0..9"):
        read_idx_split(tmp_path / "img", tmp_path / "lab")
    (tmp_path / "lab").write_bytes(make_idx_bytes(labels))
    read_images, read_labels = read_idx_split(tmp_path / "img", tmp_path / "lab")
    assert read_labels.dtype == torch.int64 and torch.equal(read_labels, torch.from_numpy(labels).long())
    with pytest.raises(DatasetFileError, match="expected uint8 images"):
        read_idx_split(tmp_path / "lab", tmp_path / "lab")


def test_find_searches_root_then_system_then_cache(tmp_path, make_idx_bytes):
    root, system, cache = tmp_path / "root", tmp_path / "system", tmp_path / "cache"
    _write_release(system, make_idx_bytes, gz=True)
    _write_release(cache, make_idx_bytes, gz=False)
    found = find_idx_files("mnist", root, cache_dir=cache, system_dirs=[system])
    assert found.directory == system and found.train_images.name == "train-images-idx3-ubyte.gz"
    _write_release(root, make_idx_bytes, gz=False)
    assert find_idx_files("mnist", root, cache_dir=cache, system_dirs=[system]).directory == root
    assert find_idx_files("mnist", None, cache_dir=cache, system_dirs=[]).directory == cache


def test_find_prefers_raw_files_and_skips_incomplete_directories(tmp_path, make_idx_bytes):
    partial, full = tmp_path / "partial", tmp_path / "full"
    _write_release(full, make_idx_bytes, gz=True)
    (full / "t10k-labels-idx1-ubyte").write_bytes((full / "t10k-labels-idx1-ubyte.gz").read_bytes())
    _write_release(partial, make_idx_bytes, gz=False)
    (partial / "t10k-labels-idx1-ubyte").unlink()
    found = find_idx_files("mnist", partial, cache_dir=full, system_dirs=[])
    assert found.directory == full
    assert found.test_labels.name == "t10k-labels-idx1-ubyte" and found.test_images.name.endswith(".gz")


def test_not_found_lists_every_directory_and_what_it_lacks(tmp_path, make_idx_bytes):
    root, cache = tmp_path / "root", tmp_path / "no-such-cache"
    _write_release(root, make_idx_bytes, gz=False)
    (root / "train-labels-idx1-ubyte").unlink()
    with pytest.raises(DatasetNotFoundError) as info:
        find_idx_files("mnist", root, cache_dir=cache, system_dirs=[tmp_path / "sys"])
    message = str(info.value)
    assert f"{root}: missing train-labels-idx1-ubyte[.gz]" in message
    assert f"{cache}: no such directory" in message and str(tmp_path / "sys") in message
    assert message.index(str(root)) < message.index(str(tmp_path / "sys")) < message.index(str(cache))


@pytest.mark.skipif(not FASHION_DIR.is_dir(), reason="dataset-fashion-mnist is not installed")
def test_real_fashion_mnist_files_are_found_and_read():
    files = find_idx_files("fashion-mnist")
    assert files.directory == FASHION_DIR
    images, labels = read_idx_split(files.test_images, files.test_labels)
    assert images.shape == (10000, 28, 28) and labels.shape == (10000,)
    assert torch.equal(torch.bincount(labels), torch.full((10,), 1000))


def test_a_gzip_bomb_is_refused_without_inflating_it(tmp_path):
    """A few hundred KB of gzip holding a valid 100-label header and 64 MiB of zeros: refused as
    trailing bytes after inflating only the declared payload (campaign 2026-11-24 finding R1)."""
    import gzip as gzip_module
    import tracemalloc
    import zlib as zlib_module

    from fedhet.data.idx import DatasetFileError, read_idx

    compressor = zlib_module.compressobj(9, zlib_module.DEFLATED, 31)
    parts = [compressor.compress(bytes([0, 0, 0x08, 1]) + (100).to_bytes(4, "big"))]
    zeros = bytes(1 << 20)
    parts += [compressor.compress(zeros) for _ in range(64)]
    parts.append(compressor.flush())
    path = tmp_path / "t10k-labels-idx1-ubyte.gz"
    path.write_bytes(b"".join(parts))
    assert path.stat().st_size < 1 << 20
    tracemalloc.start()
    try:
        with pytest.raises(DatasetFileError, match="has trailing bytes"):
            read_idx(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak
    # an honest gzipped file still reads
    good = tmp_path / "good-labels.gz"
    good.write_bytes(gzip_module.compress(bytes([0, 0, 0x08, 1]) + (3).to_bytes(4, "big") + bytes([1, 2, 3])))
    assert read_idx(good).tolist() == [1, 2, 3]


def test_a_header_larger_than_gzip_can_hold_is_refused(tmp_path):
    import gzip as gzip_module

    from fedhet.data.idx import DatasetFileError, read_idx

    path = tmp_path / "x.gz"
    path.write_bytes(gzip_module.compress(bytes([0, 0, 0x08, 1]) + (4_000_000_000).to_bytes(4, "big") + bytes(10)))
    with pytest.raises(DatasetFileError, match="more than .* gzipped bytes can hold"):
        read_idx(path)


def test_float_labels_are_named_as_float(tmp_path):
    from fedhet.data.idx import write_idx

    write_idx(tmp_path / "images", np.zeros((2, 28, 28), dtype=np.uint8))
    write_idx(tmp_path / "labels", np.array([np.nan, 1.0], dtype=np.float32))
    with pytest.raises(DatasetFileError, match="labels are float32; expected an integer type"):
        read_idx_split(tmp_path / "images", tmp_path / "labels")
