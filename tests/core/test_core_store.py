import pytest
import torch

from fedhet.core.store import ClientStore, StoreOptions


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_store_reads_what_was_written_up_to_storage_rounding(dtype, tmp_path):
    store = ClientStore("m", 5, 7, options=StoreOptions(dtype=dtype))
    rows = torch.randn(2, 7)
    store.write(torch.tensor([1, 3]), rows)
    back = store.read(torch.tensor([3, 1, 0]))
    tol = {"float32": 0, "bfloat16": 1e-2, "float16": 1e-3}[dtype]
    assert torch.allclose(back[0], rows[1], rtol=tol, atol=tol)
    assert torch.allclose(back[1], rows[0], rtol=tol, atol=tol)
    assert torch.count_nonzero(back[2]) == 0  # never written reads as zero
    assert back.dtype == torch.float32
    assert store.written.tolist() == [False, True, False, True, False]


def test_subset_store_keeps_only_selected_coordinates():
    subset = torch.tensor([0, 4, 6])
    store = ClientStore("m", 3, 7, subset=subset)
    full = torch.arange(14, dtype=torch.float32).reshape(2, 7)
    store.write(torch.tensor([0, 2]), full)
    assert store.dim == 3
    assert torch.equal(store.read(torch.tensor([2])), full[1:, subset])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_memory_mapped_store_persists_and_snapshots(tmp_path, dtype):
    options = StoreOptions(dtype=dtype, mmap_dir=str(tmp_path))
    store = ClientStore("m", 4, 3, options=options)
    store.write(torch.tensor([2]), torch.tensor([[1.0, 2.0, 3.0]]))
    snapshot = store.state_dict()
    store.write(torch.tensor([2]), torch.tensor([[9.0, 9.0, 9.0]]))
    probe = ClientStore("m", 4, 3, options=StoreOptions(dtype=dtype))
    probe.load_state_dict(snapshot)
    assert probe.read(torch.tensor([2])).tolist() == [[1.0, 2.0, 3.0]]  # the snapshot is a copy
    store.flush()
    reopened = ClientStore("m", 4, 3, options=options)
    assert reopened.read(torch.tensor([2])).tolist() == [[9.0, 9.0, 9.0]]
    reopened.load_state_dict(snapshot)
    assert reopened.read(torch.tensor([2])).tolist() == [[1.0, 2.0, 3.0]]
