"""The Gram matrix of FedAWARE's per-client momenta, kept incrementally.

FedAWARE solves its min-norm problem on ``Q_ij = <m_i, m_j>`` (docs/algorithms.md section 3). Only
the momenta of this round's clients change, so only their rows and columns of ``Q`` are
recomputed: ``memory[S] @ memory.T``, ``O(|S| N d)`` per round instead of ``O(N^2 d)``. The whole
matrix in dense float64 is the reference kernel's
(:func:`fedhet.server.aware_direction.reference_gram`).

All functions are pure: they take a Gram matrix and return a new one; the input is never modified.

Precision. The momenta may be stored in float32, bfloat16 or float16 (an ``[N, d]`` tensor, possibly
backed by a memory-mapped file, or any row getter). Products are accumulated in
``accumulate_dtype`` (default float64) after upcasting the stored values block by block, so the
incremental Gram equals a full recomputation from the same stored values to float64 rounding, and
the solver's duality gap stays meaningful. float32 accumulation is available for devices where
float64 matmuls are slow. The Gram matrix keeps its own dtype (float64 recommended); results are
written on the Gram matrix's device.

Memory and traffic. Products are taken block by block: ``chunk_rows`` rows of the store at a time,
``chunk_cols`` columns at a time. All changed rows form one block by default, so the store is
streamed once per update (the products are memory-bound). :func:`_block_shape` is the one rule for
the default sizes, which FedAWARE's fast kernel (:mod:`fedhet.server.aware_direction`) uses:

- a tensor store already in ``accumulate_dtype`` needs no upcast copies: blocks of whole rows are
  views of the table, so each product is ``[|S|, d] x [d, 256]`` (:data:`_VIEW_BLOCK_ROWS` rows,
  compute-bound) instead of many thin, memory-bound ones (benchmarks/README.md, "Server side");
- any other store (a row getter, or a tensor in another dtype) is upcast in blocks of
  ``max(|S|, _UPCAST_BLOCK_VALUES // d)`` whole rows (:data:`_UPCAST_BLOCK_VALUES` values are 128 MiB
  in float32 per thread): at ``d = 1e6``, 33 rows a block, so the changed rows are re-read ``N / 33``
  times instead of ``N / |S|``, and a memory-mapped store larger than RAM is never upcast whole.

Blocks of other rows only split the columns of one product (tests/server/test_server_table_kernels.py);
``chunk_cols`` below ``d`` splits the sums over ``d`` as well.
"""
from __future__ import annotations

from typing import Callable, Sequence, Union

import torch

from fedhet.server.table_kernels import map_single_threaded

# A momentum store: an [N, d] tensor, or a function returning the rows for an int64 index tensor.
RowSource = Union[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]

# Default block sizes (the module docstring, "Memory and traffic"): rows of a block of views of a
# store already in the accumulation dtype, and values of a block of rows that must be upcast.
_VIEW_BLOCK_ROWS = 256
_UPCAST_BLOCK_VALUES = 1 << 25


def gram_update(gram: torch.Tensor, memory: RowSource, changed_ids: torch.Tensor | Sequence[int], *,
                chunk_rows: int | None = None, chunk_cols: int | None = None,
                accumulate_dtype: torch.dtype = torch.float64, threads: int = 1,
                changed_rows: torch.Tensor | None = None) -> torch.Tensor:
    """A new Gram matrix with the rows and columns of ``changed_ids`` recomputed from ``memory``.

    ``gram``: ``[N, N]`` floating tensor (the previous Gram matrix). ``memory``: the ``[N, d]``
    momentum store, or a callable ``rows(ids: LongTensor[k]) -> Tensor[k, d]``. ``changed_ids``:
    1-D integer client ids in ``[0, N)`` (duplicates are ignored; empty means nothing changed).
    ``chunk_rows`` / ``chunk_cols``: block sizes for the upcast (``None``: automatic, see the
    module docstring). ``accumulate_dtype``: float64 (default) or float32. ``threads``: CPU threads
    for the block products (the blocks of other rows are shared out; each block is the same product
    as on one thread, so the result is bitwise the same for any count: fedhet.server.table_kernels).
    ``changed_rows``: the caller's copy of the changed rows, ``[k, d]`` in the order of the sorted,
    de-duplicated ids and equal to what ``memory`` holds for them (FedAWARE has just written them):
    used instead of gathering them from ``memory`` again, which gives the same products.

    Entries ``(i, j)`` with both ``i`` and ``j`` changed are symmetrised (mean of the two computed
    products), so the result is exactly symmetric.
    """
    _check_square_floating(gram, "gram_update", "gram")
    num_clients = gram.shape[0]
    ids = _as_client_ids(changed_ids, num_clients, "gram_update", "changed_ids")
    if accumulate_dtype not in (torch.float64, torch.float32):
        raise ValueError("gram_update: accumulate_dtype must be torch.float64 or torch.float32, "
                         f"got {accumulate_dtype}")
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"gram_update: threads must be a positive int, got {threads!r}")
    if ids.numel() == 0:
        _row_fetcher(memory, num_clients, None)     # still reject a malformed store
        return gram.clone()
    fetch, dim = _row_fetcher(memory, num_clients, ids)
    rows_per_block, cols_per_block = _block_shape(dim, ids.numel(), chunk_rows, chunk_cols, memory,
                                                  accumulate_dtype)
    new_gram = gram.clone()

    if changed_rows is not None and tuple(changed_rows.shape) != (ids.numel(), dim):
        raise ValueError(f"gram_update: changed_rows must be [{ids.numel()}, {dim}] (one row per changed id), "
                         f"got {tuple(changed_rows.shape)}")
    for start in range(0, ids.numel(), rows_per_block):
        block_ids = ids[start:start + rows_per_block]
        block_rows = fetch(block_ids) if changed_rows is None else changed_rows[start:start + rows_per_block]
        products = _products_with_all_rows(block_rows, fetch, num_clients, rows_per_block,
                                           cols_per_block, accumulate_dtype, threads)
        new_gram[block_ids, :] = products.to(device=gram.device, dtype=gram.dtype)

    # Columns mirror the rows; the changed x changed block is symmetrised first so that the two
    # writes agree exactly.
    rows = new_gram[ids, :]
    block = rows[:, ids]
    rows[:, ids] = 0.5 * (block + block.T)
    new_gram[ids, :] = rows
    new_gram[:, ids] = rows.T
    return new_gram


def normalized_gram(gram: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """``D^-1/2 Q D^-1/2`` with ``D = diag(Q)``: the Gram matrix of the unit-normalised vectors.

    This is FedAWARE's ``normalize=True`` (the authors' code unit-normalises every momentum before
    solving; docs/algorithms.md section 3). A vector whose norm ``sqrt(Q_ii)`` is ``<= eps`` (default:
    only exact zeros) has no direction: it gets a zero row and column (diagonal 0 too), never NaN.
    Note for callers: a zero vector is then the min-norm point of any hull containing it, so the
    solver puts all weight on it and the step is zero; leave such clients out (``submatrix``) if
    that is not wanted. Non-zero rows get an exact 1 on the diagonal and off-diagonal cosines
    clamped to ``[-1, 1]`` (rounding can push them just outside). Computed in float64, returned in
    ``gram``'s dtype.
    """
    _check_square_floating(gram, "normalized_gram", "gram")
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not eps >= 0:
        raise ValueError(f"normalized_gram: eps must be a number >= 0, got {eps!r}")
    q = gram.to(torch.float64)
    norms = q.diagonal().clamp_min(0.0).sqrt()
    has_direction = norms > eps
    inverse_norms = torch.where(has_direction, 1.0 / torch.where(has_direction, norms, 1.0),
                                torch.zeros_like(norms))
    cosines = (q * inverse_norms[:, None] * inverse_norms[None, :]).clamp(-1.0, 1.0)
    cosines.diagonal().copy_(has_direction.to(torch.float64))
    return cosines.to(gram.dtype)


def submatrix(gram: torch.Tensor, ids: torch.Tensor | Sequence[int]) -> torch.Tensor:
    """``gram[ids][:, ids]`` for 1-D integer ids in ``[0, N)`` (kept in the given order) or a
    boolean mask of length ``N`` (e.g. FedAWARE's "seen" clients)."""
    _check_square_floating(gram, "submatrix", "gram")
    num_clients = gram.shape[0]
    ids_tensor = torch.as_tensor(ids)
    if ids_tensor.dtype == torch.bool:
        if ids_tensor.shape != (num_clients,):
            raise ValueError(f"submatrix: a boolean mask must have shape ({num_clients},), "
                             f"got {tuple(ids_tensor.shape)}")
        index = torch.nonzero(ids_tensor.to(gram.device), as_tuple=False).flatten()
    else:
        index = _as_client_ids(ids_tensor, num_clients, "submatrix", "ids", unique=False).to(gram.device)
    return gram.index_select(0, index).index_select(1, index)


def _products_with_all_rows(changed_rows: torch.Tensor, fetch: Callable[[torch.Tensor], torch.Tensor],
                            num_clients: int, rows_per_block: int, cols_per_block: int,
                            accumulate_dtype: torch.dtype, threads: int = 1) -> torch.Tensor:
    """``changed_rows @ memory.T`` as ``[k, N]`` in ``accumulate_dtype``, block by block (blocks
    of other rows on up to ``threads`` threads; the same products whatever the count)."""
    device = changed_rows.device
    products = torch.zeros(changed_rows.shape[0], num_clients, dtype=accumulate_dtype, device=device)
    dim = changed_rows.shape[1]

    def block(start: int) -> None:
        stop = min(start + rows_per_block, num_clients)
        other_rows = fetch(torch.arange(start, stop)).to(device)
        for col in range(0, dim, cols_per_block):
            left = changed_rows[:, col:col + cols_per_block].to(accumulate_dtype)
            right = other_rows[:, col:col + cols_per_block].to(accumulate_dtype)
            products[:, start:stop] += left @ right.T      # each block owns its columns of products

    map_single_threaded(block, range(0, num_clients, rows_per_block), threads if device.type == "cpu" else 1)
    return products


def _row_fetcher(memory: RowSource, num_clients: int,
                 probe_ids: torch.Tensor | None) -> tuple[Callable[[torch.Tensor], torch.Tensor], int]:
    """A function ids -> rows [k, d], and d, after checking the store's shape.

    For a row getter, ``d`` is read from the rows of ``probe_ids[:1]`` (-1 when ``probe_ids`` is
    ``None``: the caller needs no ``d``)."""
    if isinstance(memory, torch.Tensor):
        if memory.ndim != 2 or memory.shape[0] != num_clients:
            raise ValueError(f"memory must be an [N, d] tensor with N = {num_clients} (the Gram size), "
                             f"got shape {tuple(memory.shape)}")
        if not memory.is_floating_point():
            raise ValueError(f"memory must have a floating dtype, got {memory.dtype}")

        def fetch_tensor(ids: torch.Tensor) -> torch.Tensor:
            if ids.numel() > 0 and int(ids[-1]) - int(ids[0]) + 1 == ids.numel() and bool((ids.diff() == 1).all()):
                return memory[int(ids[0]):int(ids[-1]) + 1]     # a view: no copy of a contiguous range
            return memory.index_select(0, ids.to(memory.device))
        return fetch_tensor, memory.shape[1]

    if not callable(memory):
        raise ValueError(f"memory must be an [N, d] tensor or a callable row getter, got {type(memory).__name__}")

    def fetch_rows(ids: torch.Tensor) -> torch.Tensor:
        rows = memory(ids)
        if not isinstance(rows, torch.Tensor) or rows.ndim != 2 or rows.shape[0] != ids.numel():
            shape = tuple(rows.shape) if isinstance(rows, torch.Tensor) else type(rows).__name__
            raise ValueError(f"the memory row getter must return a [{ids.numel()}, d] tensor for "
                             f"{ids.numel()} ids, got {shape}")
        if not rows.is_floating_point():
            raise ValueError(f"the memory row getter returned dtype {rows.dtype}; a floating dtype is required")
        return rows
    if probe_ids is None:
        return fetch_rows, -1
    return fetch_rows, fetch_rows(probe_ids[:1]).shape[1]


def _block_shape(dim: int, num_changed: int, chunk_rows: int | None, chunk_cols: int | None,
                 memory: RowSource, accumulate_dtype: torch.dtype) -> tuple[int, int]:
    """``(rows, cols)`` per block product: the given sizes, else the defaults of the module
    docstring ("Memory and traffic"): all changed rows in one block and whole rows, with at least
    :data:`_VIEW_BLOCK_ROWS` rows of views, or :data:`_UPCAST_BLOCK_VALUES` values of upcast rows."""
    for name, value in (("chunk_rows", chunk_rows), ("chunk_cols", chunk_cols)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ValueError(f"{name} must be a positive int or None, got {value!r}")
    if chunk_rows is None:
        views = isinstance(memory, torch.Tensor) and memory.dtype == accumulate_dtype
        least = _VIEW_BLOCK_ROWS if views else _UPCAST_BLOCK_VALUES // max(dim, 1)
        chunk_rows = max(num_changed, least, 1)
    cols = chunk_cols if chunk_cols is not None else max(dim, 1)
    return chunk_rows, min(cols, max(dim, 1))


def _as_client_ids(ids: torch.Tensor | Sequence[int], num_clients: int, where: str, name: str,
                   unique: bool = True) -> torch.Tensor:
    """Validated int64 CPU ids (sorted and de-duplicated when ``unique``)."""
    tensor = torch.as_tensor(ids)
    if tensor.numel() == 0:
        return torch.zeros(0, dtype=torch.int64)
    if tensor.ndim != 1:
        raise ValueError(f"{where}: {name} must be a 1-D tensor of client ids, got shape {tuple(tensor.shape)}")
    if tensor.dtype == torch.bool or tensor.is_floating_point() or tensor.is_complex():
        raise ValueError(f"{where}: {name} must hold integer client ids, got dtype {tensor.dtype}")
    tensor = tensor.to(device="cpu", dtype=torch.int64)
    low, high = int(tensor.min()), int(tensor.max())
    if low < 0 or high >= num_clients:
        raise ValueError(f"{where}: {name} must lie in [0, {num_clients}), got values from {low} to {high}")
    return torch.unique(tensor) if unique else tensor


def _check_square_floating(gram: torch.Tensor, where: str, name: str) -> None:
    if not isinstance(gram, torch.Tensor):
        raise ValueError(f"{where}: {name} must be a torch.Tensor, got {type(gram).__name__}")
    if gram.ndim != 2 or gram.shape[0] != gram.shape[1]:
        raise ValueError(f"{where}: {name} must be a square [N, N] matrix, got shape {tuple(gram.shape)}")
    if not gram.is_floating_point():
        raise ValueError(f"{where}: {name} must have a floating dtype, got {gram.dtype}")
