"""Whole-table kernels (server/table_kernels.py): threaded, zero-skipping and piece-wise, and still
bitwise the one-thread dense code they replace; against float64 truths within stated tolerances."""
import pytest
import torch

import fedhet.components  # noqa: F401  (registers the servers)
from fedhet.core.cohort import Cohort
from fedhet.core.options import build_options
from fedhet.core.registry import SERVERS
from fedhet.core.store import ClientStore, StoreOptions
from fedhet.server import table_kernels
from fedhet.server.base import ServerContext
from fedhet.server.gram import gram_update
from fedhet.server.table_kernels import map_single_threaded, weighted_row_sum

STORAGE = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}


def dense_reference(table, coefficients, compute_dtype, rows_per_block):
    """FedAWARE's weighted sum before the kernel (blocked GEMVs over views / upcast blocks)."""
    total = torch.zeros(table.shape[1], dtype=compute_dtype)
    for start in range(0, table.shape[0], rows_per_block):
        block = coefficients[start:start + rows_per_block]
        if not bool((block != 0).any()):
            continue
        rows = table[start:start + rows_per_block].to(compute_dtype)
        total += block.to(compute_dtype) @ rows
    return total


def sparse_coefficients(num_rows, generator, keep):
    coefficients = torch.rand(num_rows, generator=generator, dtype=torch.float64)
    coefficients[torch.rand(num_rows, generator=generator) >= keep] = 0.0
    return coefficients


@pytest.fixture
def small_pieces(monkeypatch):
    # Several column pieces per thread (and partial last ones) at test sizes: the smallest buffer,
    # one _ALIGN (64 values) wide.
    monkeypatch.setattr(table_kernels, "_BUFFER_BYTES", 256)


@pytest.mark.parametrize("storage, compute", [("float32", torch.float32), ("bfloat16", torch.float32),
                                              ("float64", torch.float64), ("float32", torch.float64)])
@pytest.mark.parametrize("keep", [1.0, 0.3, 0.05])
@pytest.mark.parametrize("threads", [1, 3])
def test_weighted_row_sum_is_bitwise_the_dense_blocked_reference(small_pieces, storage, compute, keep, threads):
    generator = torch.Generator().manual_seed(1)
    table = torch.randn(37, 301, generator=generator).to(STORAGE[storage])
    coefficients = sparse_coefficients(37, generator, keep)
    coefficients[5] = 0.7       # at least one non-zero
    for rows_per_block in (1, 8, 16, 37):
        expected = dense_reference(table, coefficients, compute, rows_per_block)
        got = weighted_row_sum(table, coefficients, compute_dtype=compute, rows_per_block=rows_per_block,
                               threads=threads)
        assert got.dtype == compute
        assert torch.equal(got, expected), (rows_per_block, float((got - expected).abs().max()))


def test_weighted_row_sum_never_upcasts_zero_coefficient_rows(small_pieces):
    # Poisoned rows with a zero coefficient in a 16-bit table: read, they would make the sum NaN.
    generator = torch.Generator().manual_seed(2)
    table = torch.randn(20, 130, generator=generator).to(torch.bfloat16)
    coefficients = torch.zeros(20, dtype=torch.float64)
    coefficients[[2, 11]] = torch.tensor([0.25, 0.75], dtype=torch.float64)
    clean = dense_reference(table, coefficients, torch.float32, 16)
    table[[0, 3, 12, 19]] = float("nan")
    got = weighted_row_sum(table, coefficients, compute_dtype=torch.float32, rows_per_block=16, threads=2)
    assert torch.equal(got, clean)


def test_weighted_row_sum_of_a_compute_dtype_table_skips_only_all_zero_blocks(small_pieces):
    # A float32 table is read through views (the reference's GEMVs): a NaN row in a block with a
    # non-zero coefficient reaches the sum, exactly as in the reference; a block whose coefficients
    # are all zero is not read at all.
    generator = torch.Generator().manual_seed(2)
    table = torch.randn(20, 130, generator=generator)
    coefficients = torch.zeros(20, dtype=torch.float64)
    coefficients[2] = 0.5
    table[19] = float("nan")                           # block 16..19: all coefficients zero
    got = weighted_row_sum(table, coefficients, compute_dtype=torch.float32, rows_per_block=16, threads=2)
    assert torch.equal(got, dense_reference(table, coefficients, torch.float32, 16))
    table[3] = float("nan")                            # block 0..15, beside the non-zero row 2
    got = weighted_row_sum(table, coefficients, compute_dtype=torch.float32, rows_per_block=16, threads=2)
    assert bool(got.isnan().any()) and torch.equal(got.isnan(), dense_reference(
        table, coefficients, torch.float32, 16).isnan())


def test_weighted_row_sum_is_within_float32_rounding_of_the_float64_sum(small_pieces):
    generator = torch.Generator().manual_seed(3)
    table = torch.randn(50, 1000, generator=generator)
    coefficients = sparse_coefficients(50, generator, 0.5)
    truth = coefficients @ table.to(torch.float64)
    got = weighted_row_sum(table, coefficients, compute_dtype=torch.float32, rows_per_block=16, threads=2)
    # |error| <= (rows + blocks) eps32 sum_i |c_i m_i| (rounded coefficients, products and sums).
    bound = (50 + 4) * torch.finfo(torch.float32).eps * (coefficients.abs() @ table.to(torch.float64).abs())
    assert bool(((got.to(torch.float64) - truth).abs() <= bound).all())


def test_weighted_row_sum_all_zero_and_bad_input():
    table = torch.ones(4, 3)
    assert torch.equal(weighted_row_sum(table, torch.zeros(4), compute_dtype=torch.float32, rows_per_block=2),
                       torch.zeros(3))
    with pytest.raises(ValueError, match="coefficients must have shape"):
        weighted_row_sum(table, torch.zeros(3), compute_dtype=torch.float32, rows_per_block=2)
    with pytest.raises(ValueError, match="rows_per_block"):
        weighted_row_sum(table, torch.zeros(4), compute_dtype=torch.float32, rows_per_block=0)


@pytest.mark.parametrize("storage", ["float32", "bfloat16"])
@pytest.mark.parametrize("getter", [False, True])
def test_threaded_gram_update_is_bitwise_one_thread_and_close_to_a_float64_gram(storage, getter):
    generator = torch.Generator().manual_seed(4)
    table = torch.randn(23, 517, generator=generator).to(STORAGE[storage])
    memory = (lambda ids: table.index_select(0, ids).to(torch.float32)) if getter else table.to(torch.float32)
    previous = table.to(torch.float64) @ table.to(torch.float64).T
    changed = torch.tensor([1, 4, 5, 17, 22])
    for chunk_rows, chunk_cols in ((5, None), (4, 100), (None, None)):
        one = gram_update(previous, memory, changed, chunk_rows=chunk_rows, chunk_cols=chunk_cols,
                          accumulate_dtype=torch.float32, threads=1)
        three = gram_update(previous, memory, changed, chunk_rows=chunk_rows, chunk_cols=chunk_cols,
                            accumulate_dtype=torch.float32, threads=3)
        assert torch.equal(one, three)
        # Against the exact Gram of the stored values: float32 accumulation over d terms.
        exact = table.to(torch.float64) @ table.to(torch.float64).T
        norms = table.to(torch.float64).norm(dim=1)
        tolerance = 517 * torch.finfo(torch.float32).eps * torch.outer(norms, norms)
        assert bool(((three - exact).abs() <= tolerance).all())


def test_threaded_gram_update_rejects_bad_threads():
    with pytest.raises(ValueError, match="threads must be a positive int"):
        gram_update(torch.zeros(2, 2), torch.zeros(2, 3), [0], threads=0)


def test_map_single_threaded_keeps_order_and_restores_the_callers_thread_count():
    before = torch.get_num_threads()
    seen = []

    def work(item):
        seen.append(torch.get_num_threads())
        return item * item

    assert map_single_threaded(work, list(range(7)), 3) == [i * i for i in range(7)]
    assert set(seen) == {1}
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError, match="boom"):
        map_single_threaded(lambda item: (_ for _ in ()).throw(RuntimeError("boom")), [1, 2], 2)
    assert torch.get_num_threads() == before


def test_store_threads_must_be_a_positive_int():
    with pytest.raises(ValueError, match="store threads"):
        StoreOptions(threads=0)


@pytest.mark.parametrize("storage", ["float32", "bfloat16"])
def test_fedaware_on_several_threads_is_bitwise_fedaware_on_one(storage):
    num_clients, dim = 12, 300
    results = []
    for threads in (1, 2):
        entry = SERVERS.get("fedaware")
        server = entry.factory(build_options(entry.options_cls, {}, section="server"))
        sizes = torch.full((num_clients,), 10, dtype=torch.int64)
        options = StoreOptions(dtype=storage, threads=threads)
        context = ServerContext(round_index=0, num_clients=num_clients,
                                make_store=lambda name, subset=None: ClientStore(name, num_clients, dim,
                                                                                 options=options, subset=subset))
        generator = torch.Generator().manual_seed(5)
        params = torch.zeros(dim)
        state = server.init(params, context)
        for _ in range(6):
            ids = torch.randperm(num_clients, generator=generator)[:5].sort().values
            base = torch.randn(dim, generator=generator)
            deltas = base + 0.3 * torch.randn(5, dim, generator=generator)
            work = Cohort(ids, deltas, sizes[ids], torch.full((5,), 3), torch.zeros(5))
            params, state, _ = server.step(state, params, work, context)
        results.append(params)
    # Six rounds of Gram rows, min-norm weights and steps: equal parameters need all of them equal.
    assert torch.equal(results[0], results[1])
    assert not torch.equal(results[0], torch.zeros(dim))


@pytest.mark.parametrize("storage", ["float32", "bfloat16"])
def test_gram_blocks_of_more_other_rows_give_the_same_bits(storage):
    # A 16-bit store is upcast in blocks of max(K, 2**25 // d) rows (gram._UPCAST_BLOCK_VALUES); with
    # all changed rows in one block, the size of the blocks of other rows only splits the columns of
    # one product.
    generator = torch.Generator().manual_seed(6)
    table = torch.randn(40, 2000, generator=generator).to(STORAGE[storage])

    def getter(ids):
        return table.index_select(0, ids).to(torch.float32)

    previous = torch.zeros(40, 40, dtype=torch.float64)
    changed = torch.tensor([3, 9, 10, 31])
    # Independent truth: the same products in float64.
    exact = gram_update(previous, getter, changed, chunk_rows=4, accumulate_dtype=torch.float64)
    reference = gram_update(previous, getter, changed, chunk_rows=4, accumulate_dtype=torch.float32)
    for chunk_rows in (4, 7, 16, 33):
        one_thread = gram_update(previous, getter, changed, chunk_rows=chunk_rows, accumulate_dtype=torch.float32)
        # The thread count only shares out the same blocks: bitwise on any CPU.
        assert torch.equal(one_thread, gram_update(previous, getter, changed, chunk_rows=chunk_rows,
                                                   accumulate_dtype=torch.float32, threads=2))
        # Another block shape changes the other operand's row count of one float32 product. MKL keeps
        # each entry's summation order across that on some CPUs (Intel, where this was bitwise) but not
        # on others (AMD EPYC): equal to float32 rounding of a 2000-term dot product, not bitwise.
        torch.testing.assert_close(one_thread, reference, rtol=1e-5, atol=1e-3)
        torch.testing.assert_close(one_thread, exact, rtol=1e-5, atol=1e-3)
    assert not torch.equal(reference, previous)


@pytest.mark.parametrize("storage", ["float32", "bfloat16"])
def test_store_read_of_a_row_range_is_a_copy_equal_to_gathered_rows(storage):
    store = ClientStore("m", 6, 5, options=StoreOptions(dtype=storage))
    store.write(torch.arange(6), torch.randn(6, 5, generator=torch.Generator().manual_seed(7)))
    ids = torch.tensor([2, 3, 4])
    rows = store.read(ids)
    assert rows.dtype == torch.float32
    assert torch.equal(rows, store.table.index_select(0, ids).to(torch.float32))
    rows.add_(1.0)
    assert not torch.equal(rows, store.read(ids))


@pytest.mark.slow
def test_fedaware_run_with_a_bfloat16_store_on_the_runs_threads_is_deterministic(tmp_path):
    # The engine gives the stores the run's CPUs (StoreOptions.threads); a bfloat16 store with them
    # repeats itself bit for bit, and differs from a float32 store (its momenta are rounded).
    from fedhet.config.schema import load_config
    from fedhet.engine import checkpoint as ckpt
    from fedhet.engine.runner import run_experiment
    from small_run import SMALL

    def final_params(name, store_dtype):
        config = load_config(None, [*SMALL, f"run.out_dir={tmp_path}", f"run.name={name}", "server.name=fedaware",
                                    f"run.store_dtype={store_dtype}", "run.rounds=3", "run.threads=2"])
        run_experiment(config)
        return ckpt.load_checkpoint(tmp_path / name)["simulator"]["params"]

    first, second = final_params("a", "bfloat16"), final_params("b", "bfloat16")
    assert torch.equal(first, second)
    assert not torch.equal(first, final_params("c", "float32"))
