"""Checkpoints of memory-mapped per-client stores: file snapshots referenced from the checkpoint, so
that saving never pulls an N x d table into RAM (store.py)."""
import io
import shutil

import pytest
import torch

from fedhet.config.schema import load_config
from fedhet.core.store import ClientStore, StoreOptions
from fedhet.engine import checkpoint as ckpt
from fedhet.engine.callbacks import read_metrics
from fedhet.engine.runner import resume_run, run_experiment
from small_run import SMALL as ENGINE_SMALL, StopAfter


def mmap_store(directory, dtype="float32", num_clients=6, dim=5, name="m"):
    return ClientStore(name, num_clients, dim, options=StoreOptions(dtype=dtype, mmap_dir=str(directory)))


def raw(store):
    """The table's bytes as stored (bfloat16 as 16-bit words)."""
    table = store.table.view(torch.int16) if store.table.dtype == torch.bfloat16 else store.table
    return table.clone().numpy().tobytes()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_snapshot_is_a_file_copy_referenced_by_the_state_and_later_writes_do_not_change_it(tmp_path, dtype):
    store = mmap_store(tmp_path, dtype)
    store.write(torch.tensor([1, 4]), torch.randn(2, 5))
    before = raw(store)
    state = store.state_dict()
    assert not any(isinstance(v, torch.Tensor) and v.numel() >= store.table.numel() for v in state.values())
    snapshot = tmp_path / state["snapshot_file"]
    assert snapshot.read_bytes() == before
    store.write(torch.tensor([1, 2]), torch.full((2, 5), 7.0))
    assert snapshot.read_bytes() == before
    store.load_state_dict(state)
    assert raw(store) == before
    assert store.written.tolist() == [False, True, False, False, True, False]


def test_a_checkpoint_holds_a_reference_not_the_table(tmp_path):
    store = mmap_store(tmp_path / "stores", num_clients=200, dim=5000)     # a 4 MB table
    store.write(torch.arange(0, 200, 3), torch.randn(67, 5000))
    expected = store.read_all().clone()
    buffer = io.BytesIO()
    torch.save(ckpt.to_saveable({"server": {"momenta": store}}), buffer)
    assert buffer.tell() < store.nbytes() // 100
    store.write(torch.tensor([0]), torch.zeros(1, 5000))
    buffer.seek(0)
    fresh = mmap_store(tmp_path / "stores", num_clients=200, dim=5000)
    restored = ckpt.restore({"server": {"momenta": fresh}}, torch.load(buffer, weights_only=False), "cpu")
    assert restored["server"]["momenta"] is fresh
    assert torch.equal(fresh.read_all(), expected)


def test_the_three_latest_snapshots_are_kept(tmp_path):
    store = mmap_store(tmp_path)
    states = []
    for value in range(4):
        store.write(torch.tensor([0]), torch.full((1, 5), float(value)))
        states.append(store.state_dict())
    names = sorted(p.name for p in tmp_path.glob("store-m.snapshot-*.bin"))
    assert names == [states[1]["snapshot_file"], states[2]["snapshot_file"], states[3]["snapshot_file"]]
    # The previous snapshot (referenced by the checkpoint still on disk while the next one is
    # written) stays loadable.
    store.load_state_dict(states[2])
    assert store.read(torch.tensor([0])).tolist() == [[2.0] * 5]
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())


def test_numbering_continues_after_a_restore(tmp_path):
    store = mmap_store(tmp_path)
    first = store.state_dict()
    store.state_dict()
    fresh = mmap_store(tmp_path)
    fresh.load_state_dict(first)
    assert fresh.state_dict()["snapshot_file"] == "store-m.snapshot-000002.bin"


def test_snapshot_is_found_next_to_the_store_after_the_run_directory_moved(tmp_path):
    store = mmap_store(tmp_path / "old" / "stores")
    store.write(torch.tensor([3]), torch.ones(1, 5))
    state = store.state_dict()
    shutil.move(tmp_path / "old", tmp_path / "new")
    moved = mmap_store(tmp_path / "new" / "stores")
    moved.load_state_dict(state)
    assert moved.read(torch.tensor([3])).tolist() == [[1.0] * 5]


def test_snapshots_load_across_store_kinds(tmp_path):
    on_disk = mmap_store(tmp_path)
    on_disk.write(torch.tensor([2]), torch.full((1, 5), 3.0))
    in_ram = ClientStore("m", 6, 5)
    in_ram.load_state_dict(on_disk.state_dict())
    assert torch.equal(in_ram.read_all(), on_disk.read_all())
    in_ram.write(torch.tensor([5]), torch.full((1, 5), -1.0))
    on_disk.load_state_dict(in_ram.state_dict())
    assert torch.equal(on_disk.read_all(), in_ram.read_all())


def test_missing_truncated_or_mismatched_snapshots_fail_clearly(tmp_path):
    store = mmap_store(tmp_path)
    state = store.state_dict()
    with pytest.raises(ValueError, match="storage dtype float32 != configured bfloat16"):
        ClientStore("m", 6, 5, options=StoreOptions(dtype="bfloat16", mmap_dir=str(tmp_path / "b"))).load_state_dict(state)
    with pytest.raises(ValueError, match="shape"):
        ClientStore("m", 7, 5, options=StoreOptions(mmap_dir=str(tmp_path / "c"))).load_state_dict(state)
    snapshot = tmp_path / state["snapshot_file"]
    snapshot.write_bytes(snapshot.read_bytes()[:-4])
    with pytest.raises(ValueError, match="truncated"):
        store.load_state_dict(state)
    snapshot.unlink()
    with pytest.raises(FileNotFoundError, match="snapshot file"):
        store.load_state_dict(state)


def test_row_blocks_cover_the_table_within_the_budget():
    store = ClientStore("m", 10, 8)
    blocks = list(store.row_blocks(max_bytes=3 * 8 * 4))
    assert blocks == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert torch.equal(torch.cat([store.read_range(a, b) for a, b in blocks]), store.read_all())


# --- through the runner: a memory-mapped bfloat16 FedAWARE run, interrupted and resumed ----------------

SMALL = [*ENGINE_SMALL, "server.name=fedaware", "server.alpha=0.3", "run.store_dtype=bfloat16"]


@pytest.mark.slow
def test_interrupted_memory_mapped_fedaware_run_resumes_exactly(tmp_path):
    def config(*extra):
        return load_config(None, [*SMALL, f"run.out_dir={tmp_path}", *extra])

    run_experiment(config("run.name=full"))
    with pytest.raises(KeyboardInterrupt):
        run_experiment(config("run.name=cut", "run.store_mmap=true"), callbacks=[StopAfter(3)])
    assert list((tmp_path / "cut" / "stores").glob("store-fedaware_momentum.snapshot-*.bin"))
    resume_run(tmp_path / "cut")

    def values(name):
        return [{k: v for k, v in r.items() if k != "wall_seconds"} for r in read_metrics(tmp_path / name / "metrics.jsonl")]

    assert values("full") == values("cut")
    assert "aware_weight_entropy" in values("cut")[-1]
    params = [ckpt.load_checkpoint(tmp_path / n)["simulator"]["params"] for n in ("full", "cut")]
    assert torch.equal(*params)


def test_snapshots_of_a_sparse_store_stay_sparse(tmp_path):
    # 2,000 clients x 4,096 floats = 32 MiB logical; 3 rows written. A full copy would allocate all
    # of it; the snapshot must allocate about what the live store does (st_blocks: 512-byte units).
    store = mmap_store(tmp_path, num_clients=2000, dim=4096)
    store.write(torch.tensor([5, 900, 1999]), torch.ones(3, 4096))
    state = store.state_dict()
    snapshot = tmp_path / state["snapshot_file"]
    live_bytes = store.path.stat().st_blocks * 512
    snapshot_bytes = snapshot.stat().st_blocks * 512
    assert snapshot.stat().st_size == store.nbytes()
    assert live_bytes < store.nbytes() // 20, "the store file itself should be sparse on this filesystem"
    assert snapshot_bytes <= live_bytes + (1 << 20)
    store.write(torch.tensor([0]), torch.full((1, 4096), 2.0))    # after the snapshot: must be undone
    fresh = mmap_store(tmp_path / "other", num_clients=2000, dim=4096)
    fresh.load_state_dict(state)
    store.load_state_dict(state)
    assert torch.equal(store.read_all(), fresh.read_all())
    # Restored by a file copy that keeps holes: still sparse.
    assert fresh.path.stat().st_blocks * 512 <= live_bytes + (1 << 20)
    assert torch.equal(fresh.read(torch.tensor([5, 900, 1999, 0])), torch.cat([torch.ones(3, 4096), torch.zeros(1, 4096)]))


def test_sparse_copy_without_kernel_copy_gives_the_same_bytes(tmp_path, monkeypatch):
    import errno
    import os

    import fedhet.core.store as store_module

    def refuse(*args):
        raise OSError(errno.EXDEV, "cross-device")

    monkeypatch.setattr(store_module.os, "copy_file_range", refuse, raising=False)
    source = tmp_path / "source.bin"
    with open(source, "wb") as handle:      # data, a 1 MiB hole, data, a trailing hole
        handle.write(b"a" * 5000)
        handle.seek(5000 + (1 << 20))
        handle.write(b"b" * 3000)
        handle.truncate(5000 + (1 << 20) + 3000 + (1 << 20))
    store_module.copy_sparse(source, tmp_path / "copy.bin")
    assert (tmp_path / "copy.bin").read_bytes() == source.read_bytes()
    assert os.path.getsize(tmp_path / "copy.bin") == os.path.getsize(source)
