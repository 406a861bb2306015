"""Whole-table kernels of a per-client store, on several CPU threads with the numbers of one.

FedAWARE's server step (docs/algorithms.md section 3) streams its ``[N, d]`` momentum table twice
a round: once for the Gram rows of this round's clients (:func:`fedhet.server.gram.gram_update`)
and once for the step ``d = sum_i c_i m_i`` (:func:`weighted_row_sum`). Both are long products
over a table much larger than the caches, so they are memory-bound (or, with 100 changed rows,
compute-bound) and scale with cores. This module runs them on ``threads`` Python threads, each
running torch with one intra-op thread, on disjoint pieces whose boundaries are those of the
one-thread code: every BLAS call is the same call with the same operands as on one thread, so the
result is bitwise that of one thread whatever the number of threads (tests/server/
test_server_table_kernels.py checks it). Letting BLAS itself use several threads would not be:
it splits the reduction over ``d`` differently for each thread count.

The workers are idle clients' cores: the server step runs between rounds, while the backend's
worker processes wait (``StoreOptions.threads``, set by the engine to the CPUs a run may use).
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence, TypeVar

import torch

Item = TypeVar("Item")
Result = TypeVar("Result")

# Column boundaries of weighted_row_sum's pieces are multiples of this many values. BLAS kernels
# treat columns in vector lanes (16 float32 with AVX-512) and a last partial group differently (no
# FMA), so a piece must start where the whole-row product's lanes start: narrower pieces (8) were
# measured to change bits, multiples of 64 never did (tests/server/test_server_table_kernels.py).
_ALIGN = 64
# Bytes of the buffer that holds a block's non-zero rows (upcast) between zero rows: about an L2
# cache; at d = 1e6 and 16-row blocks, 8,192 columns a copy.
_BUFFER_BYTES = 1 << 19


def map_single_threaded(function: Callable[[Item], Result], items: Sequence[Item], threads: int) -> list[Result]:
    """``[function(item) for item in items]`` on up to ``threads`` Python threads.

    With ``threads <= 1`` (or a single item) the calls run here, in the caller's torch settings:
    exactly the code without this module. Otherwise each worker sets its own torch (OpenMP/MKL)
    thread count to one before its first call, so each call computes what a one-thread process
    computes; the caller's count is restored afterwards (MKL's setting is process-wide).
    """
    if threads <= 1 or len(items) <= 1:
        return [function(item) for item in items]
    caller_threads = torch.get_num_threads()

    def single_threaded(item: Item) -> Result:
        torch.set_num_threads(1)
        return function(item)

    try:
        with ThreadPoolExecutor(max_workers=min(int(threads), len(items)),
                                thread_name_prefix="fedhet-table") as pool:
            return list(pool.map(single_threaded, items))
    finally:
        torch.set_num_threads(caller_threads)


def weighted_row_sum(table: torch.Tensor, coefficients: torch.Tensor, *, compute_dtype: torch.dtype,
                     rows_per_block: int, threads: int = 1) -> torch.Tensor:
    """``sum_i coefficients[i] table[i]`` as a ``[d]`` tensor in ``compute_dtype`` on the table's device.

    ``table``: ``[N, d]`` in any floating dtype (e.g. a bfloat16 store), read as stored and upcast
    to ``compute_dtype`` piece by piece. ``coefficients``: ``[N]`` (any floating dtype, any device;
    rounded to ``compute_dtype`` as the reference does).

    The numbers are bitwise those of the dense blocked reference::

        total = 0
        for each block of rows_per_block consecutive rows with a non-zero coefficient:
            total += coefficients[block].to(compute_dtype) @ table[block].to(compute_dtype)

    Three things make it cheaper without changing a bit: the columns are cut into pieces
    (the matrix-vector product of a block computes each column independently, so a piece of
    columns gives the same values); the pieces run on ``threads`` threads
    (:func:`map_single_threaded`); and rows whose coefficient is exactly zero are not read: they
    are zero rows in a buffer, whose products ``0 * 0 = 0`` are the reference's ``0 * m = 0``
    (finite ``m``), in the same places of the same product. (A momentum with a NaN or infinite
    entry and a zero coefficient gives NaN in the reference and 0 here.) Zero rows are skipped
    only in a table that needs an upcast (a 16-bit store): a table already in ``compute_dtype``
    is read through views, one GEMV per block with a non-zero coefficient, which is the reference
    itself. Copying only the non-zero rows of such a table was slower at every size measured
    (one thread, float32, 1, 9 and N/4 non-zero coefficients; N = 100, d = 199,210: 4.5-8.4 ms
    against 3.5-3.6 ms; N = 300, d = 1e6: 4.5-109 ms against 3.1-54 ms;
    ``benchmarks/bench_bookkeeping.py``): the column pieces cost more in small operations than
    the zero rows cost to stream.
    """
    if table.ndim != 2:
        raise ValueError(f"weighted_row_sum: table must be [N, d], got shape {tuple(table.shape)}")
    num_rows, dim = table.shape
    if coefficients.shape != (num_rows,):
        raise ValueError(f"weighted_row_sum: coefficients must have shape ({num_rows},), "
                         f"got {tuple(coefficients.shape)}")
    if not isinstance(rows_per_block, int) or rows_per_block < 1:
        raise ValueError(f"weighted_row_sum: rows_per_block must be a positive int, got {rows_per_block!r}")
    device = table.device
    dense = coefficients.to(device="cpu")
    total = torch.zeros(dim, dtype=compute_dtype, device=device)
    blocks = []   # (start, stop, coefficients in compute_dtype, local non-zero rows or None for a view)
    for start in range(0, num_rows, rows_per_block):
        stop = min(start + rows_per_block, num_rows)
        block = dense[start:stop]
        nonzero = torch.nonzero(block != 0).flatten()
        if nonzero.numel() == 0:
            continue
        as_view = table.dtype == compute_dtype
        blocks.append((start, stop, block.to(device=device, dtype=compute_dtype),
                       None if as_view else nonzero.to(device)))
    if not blocks or dim == 0:
        return total
    buffer_rows = max(stop - start for start, stop, _, _ in blocks)
    element = torch.empty(0, dtype=compute_dtype).element_size()
    # Columns per copy of non-zero rows: the buffer stays cache-sized (its zero rows are zeroed
    # once per block, and read by every product of the block).
    width = max(_ALIGN, (_BUFFER_BYTES // (element * buffer_rows)) // _ALIGN * _ALIGN)
    threads = max(1, threads if device.type == "cpu" else 1)
    per_thread = -(-dim // threads)
    per_thread = -(-per_thread // _ALIGN) * _ALIGN
    ranges = [(first, min(first + per_thread, dim)) for first in range(0, dim, per_thread)]

    def columns(bounds: tuple[int, int]) -> None:
        first, last = bounds
        part = total[first:last]                      # each range owns its columns of total
        buffer = None
        for start, stop, block_coefficients, nonzero in blocks:
            if nonzero is None:
                part += block_coefficients @ table[start:stop, first:last]
                continue
            if buffer is None:
                buffer = torch.empty(buffer_rows, width, dtype=compute_dtype, device=device)
            block_rows = buffer[:stop - start]
            block_rows.zero_()
            for column in range(first, last, width):
                end = min(column + width, last)
                rows = block_rows[:, :end - column]
                rows[nonzero] = table[start:stop, column:end].index_select(0, nonzero).to(compute_dtype)
                part[column - first:end - first] += block_coefficients @ rows

    map_single_threaded(columns, ranges, threads)
    return total
