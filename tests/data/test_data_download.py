"""Downloads against a local HTTP server on 127.0.0.1 only: checksums, atomicity, resume, offline."""
import dataclasses
import gzip
import hashlib

import numpy as np
import pytest
import torch

from fedhet.data.datasets import IDX_SOURCES, load_idx_dataset
from fedhet.data.download import ChecksumError, DownloadError, download_file
from fedhet.data.idx import IDX_FILE_STEMS, DatasetNotFoundError

PAYLOAD = bytes(range(256)) * 40


def _md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def test_download_verifies_md5_and_sha256_and_leaves_no_temp_file(tmp_path, local_http_server):
    local_http_server.files["blob"] = PAYLOAD
    dest = tmp_path / "sub" / "blob"
    result = download_file(local_http_server.base_url + "blob", dest, md5=_md5(PAYLOAD),
                           sha256=hashlib.sha256(PAYLOAD).hexdigest().upper())
    assert result == dest and dest.read_bytes() == PAYLOAD
    assert [p.name for p in dest.parent.iterdir()] == ["blob"]


def test_checksum_mismatch_removes_everything(tmp_path, local_http_server):
    local_http_server.files["blob"] = PAYLOAD
    dest = tmp_path / "blob"
    wrong = "0" * 32
    with pytest.raises(ChecksumError) as info:
        download_file(local_http_server.base_url + "blob", dest, md5=wrong)
    message = str(info.value)
    assert "md5" in message and wrong in message and _md5(PAYLOAD) in message and "blob" in message
    assert list(tmp_path.iterdir()) == []


def test_unreachable_host_says_offline_names_url_and_hint(tmp_path, closed_local_port):
    url = f"http://127.0.0.1:{closed_local_port}/train-images-idx3-ubyte.gz"
    dest = tmp_path / "train-images-idx3-ubyte.gz"
    with pytest.raises(DownloadError) as info:
        download_file(url, dest, timeout=5, manual_hint="Put the files in data.root.")
    message = str(info.value)
    assert url in message and "offline" in message and "Put the files in data.root." in message
    assert not dest.exists() and list(tmp_path.iterdir()) == []


def test_http_error_is_reported(tmp_path, local_http_server):
    with pytest.raises(DownloadError, match="HTTP 404"):
        download_file(local_http_server.base_url + "missing", tmp_path / "missing")
    assert not (tmp_path / "missing").exists()


def test_interrupted_download_leaves_no_target_and_resumes_with_a_range(tmp_path, local_http_server):
    local_http_server.files["blob"] = PAYLOAD
    local_http_server.truncate_after["blob"] = 3000
    dest = tmp_path / "blob"
    with pytest.raises(DownloadError, match="resumes"):
        download_file(local_http_server.base_url + "blob", dest, md5=_md5(PAYLOAD))
    assert not dest.exists()
    assert (tmp_path / "blob.part").read_bytes() == PAYLOAD[:3000]
    download_file(local_http_server.base_url + "blob", dest, md5=_md5(PAYLOAD))
    assert dest.read_bytes() == PAYLOAD and not (tmp_path / "blob.part").exists()
    assert [r["range"] for r in local_http_server.requests] == ["", "bytes=3000-"]


def test_server_ignoring_range_restarts_from_zero(tmp_path, local_http_server):
    local_http_server.files["blob"] = PAYLOAD
    local_http_server.honour_range = False
    (tmp_path / "blob.part").write_bytes(b"stale bytes from another file")
    download_file(local_http_server.base_url + "blob", tmp_path / "blob", md5=_md5(PAYLOAD))
    assert (tmp_path / "blob").read_bytes() == PAYLOAD


def test_complete_part_file_gets_416_and_restarts(tmp_path, local_http_server):
    local_http_server.files["blob"] = PAYLOAD
    (tmp_path / "blob.part").write_bytes(b"x" * (len(PAYLOAD) + 5))
    download_file(local_http_server.base_url + "blob", tmp_path / "blob", md5=_md5(PAYLOAD))
    assert (tmp_path / "blob").read_bytes() == PAYLOAD


def _fixture_release(make_idx_bytes, count=6):
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (count, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, count, dtype=np.uint8)
    arrays = (images, labels, images[:2], labels[:2])
    return images, labels, {stem: gzip.compress(make_idx_bytes(a)) for stem, a in zip(IDX_FILE_STEMS, arrays)}


def test_dataset_downloads_missing_files_into_the_cache_and_normalises(tmp_path, local_http_server, make_idx_bytes):
    images, labels, files = _fixture_release(make_idx_bytes)
    for stem, data in files.items():
        local_http_server.files[f"{stem}.gz"] = data
    source = dataclasses.replace(IDX_SOURCES["mnist"], base_url=local_http_server.base_url,
                                 gz_md5={stem: _md5(data) for stem, data in files.items()})
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "train-labels-idx1-ubyte.gz").write_bytes(files["train-labels-idx1-ubyte"])  # already there
    bundle = load_idx_dataset("mnist", source, root=None, cache_dir=cache, system_dirs=[])
    assert sorted(r["path"] for r in local_http_server.requests) == sorted(
        f"{s}.gz" for s in IDX_FILE_STEMS if s != "train-labels-idx1-ubyte")
    assert sorted(p.name for p in cache.iterdir()) == sorted(f"{s}.gz" for s in IDX_FILE_STEMS)
    expected = (torch.from_numpy(images).float().unsqueeze(1) / 255 - 0.1307) / 0.3081
    assert bundle.train.inputs.dtype == torch.float32 and bundle.train.inputs.shape == (6, 1, 28, 28)
    assert torch.allclose(bundle.train.inputs, expected, rtol=0, atol=1e-6)
    assert torch.equal(bundle.train.targets, torch.from_numpy(labels).long())
    assert len(bundle.test) == 2 and bundle.input_shape == (1, 28, 28) and bundle.num_classes == 10


def test_download_off_lists_every_place_searched(tmp_path):
    cache = tmp_path / "cache"          # no data.root: a given root is the only place searched (finding 9)
    with pytest.raises(DatasetNotFoundError) as info:
        load_idx_dataset("fmnist", IDX_SOURCES["fmnist"], root=None, download=False, cache_dir=cache,
                         system_dirs=[tmp_path / "system"])
    message = str(info.value)
    for place in (tmp_path / "system", cache):
        assert str(place) in message
    assert "data.download = false" in message and "apt-get install dataset-fashion-mnist" in message


def test_offline_download_lists_places_and_how_to_provide_files(tmp_path, closed_local_port):
    source = dataclasses.replace(IDX_SOURCES["fmnist"], base_url=f"http://127.0.0.1:{closed_local_port}/")
    cache = tmp_path / "cache"
    with pytest.raises(DownloadError) as info:
        load_idx_dataset("fmnist", source, root=None, cache_dir=cache, system_dirs=[tmp_path / "system"])
    message = str(info.value)
    assert "offline" in message and f"127.0.0.1:{closed_local_port}/train-images-idx3-ubyte.gz" in message
    assert str(tmp_path / "system") in message and str(cache) in message
    assert "data.root" in message and "apt-get install dataset-fashion-mnist" in message
    assert not any(cache.glob("*.gz"))
