"""Incremental Gram matrix: equals a direct float64 recomputation; normalisation; submatrices."""
from __future__ import annotations

import pytest
import torch

from fedhet.server.gram import gram_update, normalized_gram, submatrix


def direct_gram(memory: torch.Tensor) -> torch.Tensor:
    stored = memory.to(torch.float64)
    return stored @ stored.T


def gram_of_all_rows(memory, num_clients=None, dtype=torch.float64, **options) -> torch.Tensor:
    """Every row changed from a zero Gram matrix: gram_update computing the whole matrix."""
    num_clients = memory.shape[0] if num_clients is None else num_clients
    zeros = torch.zeros(num_clients, num_clients, dtype=dtype)
    return gram_update(zeros, memory, torch.arange(num_clients), **options)


def assert_close_float64(actual: torch.Tensor, expected: torch.Tensor) -> None:
    scale = float(expected.abs().max()) if expected.numel() else 1.0
    assert actual.dtype == torch.float64
    assert float((actual - expected).abs().max()) <= 1e-13 * max(scale, 1.0)


@pytest.mark.parametrize("storage", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("chunks", [dict(), dict(chunk_rows=1), dict(chunk_rows=3, chunk_cols=7)])
def test_incremental_updates_over_rounds_equal_full_recomputation(storage, chunks):
    generator = torch.Generator().manual_seed(0)
    num_clients, dim = 13, 37
    memory = torch.randn(num_clients, dim, generator=generator).to(storage)
    gram = gram_of_all_rows(memory, **chunks)
    assert_close_float64(gram, direct_gram(memory))
    for _ in range(12):
        size = int(torch.randint(0, num_clients + 1, (1,), generator=generator))
        changed = torch.randperm(num_clients, generator=generator)[:size]
        alpha = 0.5
        update = torch.randn(size, dim, generator=generator)
        memory = memory.clone()
        memory[changed] = ((1 - alpha) * memory[changed].float() + alpha * update).to(storage)
        if size > 0 and int(torch.randint(0, 2, (1,), generator=generator)):
            memory[changed[0]] = 0.0           # a zero momentum now and then
        gram = gram_update(gram, memory, changed, **chunks)
        assert_close_float64(gram, direct_gram(memory))
        assert torch.equal(gram, gram.T)


def test_only_the_changed_rows_and_columns_are_recomputed():
    generator = torch.Generator().manual_seed(1)
    memory = torch.randn(6, 5, dtype=torch.float64, generator=generator)
    stale = torch.full((6, 6), 7.0, dtype=torch.float64)    # a deliberately wrong "previous" Gram
    updated = gram_update(stale, memory, torch.tensor([4, 1]))
    truth = direct_gram(memory)
    changed = torch.zeros(6, dtype=torch.bool)
    changed[[1, 4]] = True
    touched = changed[:, None] | changed[None, :]
    assert torch.allclose(updated[touched], truth[touched], rtol=1e-14, atol=0)
    assert bool((updated[~touched] == 7.0).all())


def test_input_gram_is_not_modified_and_duplicates_and_empty_ids_are_fine():
    memory = torch.randn(5, 4, generator=torch.Generator().manual_seed(3))
    gram = gram_of_all_rows(memory)
    before = gram.clone()
    memory[2] += 1.0
    again = gram_update(gram, memory, torch.tensor([2, 2, 2]))
    assert torch.equal(gram, before)
    assert_close_float64(again, direct_gram(memory))
    unchanged = gram_update(gram, memory, torch.tensor([], dtype=torch.int64))
    assert torch.equal(unchanged, gram) and unchanged.data_ptr() != gram.data_ptr()
    assert torch.equal(gram_update(gram, memory, []), gram)


def test_row_getter_gives_the_same_gram_and_sees_only_requested_rows():
    generator = torch.Generator().manual_seed(4)
    memory = torch.randn(9, 11, generator=generator).to(torch.bfloat16)
    requested = []

    def rows(ids: torch.Tensor) -> torch.Tensor:
        requested.append(ids.clone())
        return memory[ids]

    gram = gram_of_all_rows(rows, num_clients=9, chunk_rows=4)
    assert_close_float64(gram, direct_gram(memory))
    memory[[0, 5]] = torch.randn(2, 11, generator=generator).to(torch.bfloat16)
    updated = gram_update(gram, rows, torch.tensor([5, 0]), chunk_rows=4)
    assert_close_float64(updated, direct_gram(memory))
    assert max(ids.numel() for ids in requested) <= 4
    assert_close_float64(gram_of_all_rows(rows, num_clients=9, chunk_rows=2, chunk_cols=3), direct_gram(memory))
    assert_close_float64(gram_of_all_rows(rows, num_clients=9), direct_gram(memory))


def test_float32_accumulation_and_float32_gram():
    memory = torch.randn(8, 1000, generator=torch.Generator().manual_seed(5))
    gram = gram_of_all_rows(memory, dtype=torch.float32, accumulate_dtype=torch.float32)
    assert gram.dtype == torch.float32
    assert torch.allclose(gram.double(), direct_gram(memory), rtol=1e-5, atol=1e-3)


def test_normalized_gram_is_the_gram_of_unit_vectors():
    generator = torch.Generator().manual_seed(2)
    scales = 100 * torch.rand(10, 1, dtype=torch.float64, generator=generator)
    vectors = torch.randn(10, 25, dtype=torch.float64, generator=generator) * scales
    unit = vectors / vectors.norm(dim=1, keepdim=True)
    expected = unit @ unit.T
    normalized = normalized_gram(direct_gram(vectors))
    assert torch.allclose(normalized, expected, rtol=0, atol=1e-14)
    assert torch.equal(normalized.diagonal(), torch.ones(10, dtype=torch.float64))


def test_normalized_gram_gives_zero_vectors_zero_rows_without_nan():
    vectors = torch.randn(5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    vectors[1] = 0.0
    vectors[3] = 1e-9
    normalized = normalized_gram(direct_gram(vectors))
    assert bool(torch.isfinite(normalized).all())
    assert bool((normalized[1] == 0).all()) and bool((normalized[:, 1] == 0).all())
    assert float(normalized[3, 3]) == 1.0            # tiny but non-zero: still a direction
    thresholded = normalized_gram(direct_gram(vectors), eps=1e-6)
    assert bool((thresholded[3] == 0).all()) and bool((thresholded[:, 3] == 0).all())
    keep = torch.tensor([0, 2, 4])
    unit = vectors[keep] / vectors[keep].norm(dim=1, keepdim=True)
    assert torch.allclose(submatrix(thresholded, keep), unit @ unit.T, atol=1e-14)


def test_normalized_gram_keeps_dtype_and_clamps_cosines():
    gram = torch.tensor([[1.0, 1.0000001], [1.0000001, 1.0]], dtype=torch.float32)
    normalized = normalized_gram(gram)
    assert normalized.dtype == torch.float32
    assert float(normalized.abs().max()) <= 1.0


def test_submatrix_with_ids_and_with_mask():
    gram = torch.arange(16, dtype=torch.float64).reshape(4, 4)
    expected = torch.tensor([[10.0, 8.0], [2.0, 0.0]], dtype=torch.float64)
    assert torch.equal(submatrix(gram, torch.tensor([2, 0])), expected)
    mask = torch.tensor([True, False, True, True])
    assert torch.equal(submatrix(gram, mask), gram[[0, 2, 3]][:, [0, 2, 3]])
    assert submatrix(gram, torch.zeros(4, dtype=torch.bool)).shape == (0, 0)


@pytest.mark.parametrize("call, message", [
    (lambda: gram_update(torch.zeros(3, 3), torch.zeros(4, 2), torch.tensor([0])), r"\[N, d\] tensor with N = 3"),
    (lambda: gram_update(torch.zeros(3, 3), torch.zeros(3, 2), torch.tensor([3])), r"\[0, 3\)"),
    (lambda: gram_update(torch.zeros(3, 3), torch.zeros(3, 2), torch.tensor([-1])), r"\[0, 3\)"),
    (lambda: gram_update(torch.zeros(3, 3), torch.zeros(3, 2), torch.tensor([0.0])), "integer client ids"),
    (lambda: gram_update(torch.zeros(3, 3), torch.zeros(3, 2), torch.tensor([[0]])), "1-D"),
    (lambda: gram_update(torch.zeros(3, 4), torch.zeros(3, 2), torch.tensor([0])), "square"),
    (lambda: gram_update(torch.zeros(3, 3), torch.zeros(3, 2, dtype=torch.int64), torch.tensor([0])), "floating"),
    (lambda: gram_update(torch.zeros(3, 3), torch.zeros(3, 2), torch.tensor([0]), chunk_rows=0), "chunk_rows"),
    (lambda: gram_update(torch.zeros(3, 3), lambda ids: torch.zeros(3, 2), torch.tensor([0])), "row getter"),
    (lambda: gram_update(torch.zeros(3, 3), torch.zeros(3, 2), torch.tensor([0]), chunk_cols=-2), "chunk_cols"),
    (lambda: gram_update(torch.zeros(3, 3), torch.zeros(3, 2), torch.tensor([0]), accumulate_dtype=torch.float16),
     "accumulate_dtype"),
    (lambda: normalized_gram(torch.zeros(2, 2), eps=-1.0), "eps"),
    (lambda: submatrix(torch.zeros(3, 3), torch.tensor([True, False])), "mask"),
    (lambda: submatrix(torch.zeros(3, 3), torch.tensor([5])), r"\[0, 3\)"),
])
def test_clear_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("accumulate", [torch.float32, torch.float64])
def test_changed_rows_given_by_the_caller_give_the_same_bits_as_gathering_them(accumulate):
    # FedAWARE passes the momenta it has just written: the same values as the store's rows.
    generator = torch.Generator().manual_seed(3)
    table = torch.randn(30, 500, generator=generator, dtype=accumulate)
    previous = gram_of_all_rows(table, accumulate_dtype=accumulate)
    changed = torch.tensor([2, 7, 8, 21])
    table[changed] = torch.randn(4, 500, generator=generator, dtype=accumulate)
    gathered = gram_update(previous, table, changed, accumulate_dtype=accumulate, chunk_rows=32, chunk_cols=500)
    given = gram_update(previous, table, changed, accumulate_dtype=accumulate, chunk_rows=32, chunk_cols=500,
                        changed_rows=table[changed].clone())
    assert torch.equal(gathered, given)
    with pytest.raises(ValueError, match="changed_rows must be"):
        gram_update(previous, table, changed, changed_rows=table[:3])
