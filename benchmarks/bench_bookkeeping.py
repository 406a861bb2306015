"""Per-round bookkeeping of a claims round, before and after issue 22's 2026-11-25 changes, one thread.

Three kernels, each timed against the code it replaced (a copy of that code is kept below, ``legacy_*``)
on the claims' sizes (the FedAvg MLP, d = 199,210; N = 100 clients; K = 10 a round), and checked to give
the same bits:

- **the divergence check** of every round (``fedhet.engine.divergence``): ``torch.isfinite(x).all()``
  over the cohort's ``[K, d]`` deltas and the model, against the finite-sum test that replaced it;
- **the running sum of MIFA and FedVarp** (``fedhet.server.latest_updates.change_of_rows``): the
  whole-width float64 ``(new - old).sum(0)`` against the cache-sized column blocks;
- **FedAWARE's weighted sum** ``sum_i lambda_i m_i`` (``fedhet.server.table_kernels.weighted_row_sum``)
  over a float32 table: copying only the rows with a non-zero weight (the old path below half the rows
  non-zero) against reading through views; also N = 1000, d = 1e5 and N = 300, d = 1e6.

Times are medians of CPU seconds (``time.process_time``: the machine may be shared) over ``--repeats``
calls, in milliseconds.

Usage: PYTHONPATH=src .venv/bin/python benchmarks/bench_bookkeeping.py [--repeats 15] [--out benchmarks/results]
"""
from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from machine import machine  # noqa: E402

from fedhet.server.latest_updates import change_of_rows  # noqa: E402
from fedhet.server.table_kernels import weighted_row_sum  # noqa: E402

ALIGN, BUFFER_BYTES, VIEW_SHARE = 64, 1 << 19, 0.5


def legacy_all_finite(tensor: torch.Tensor) -> bool:
    """The divergence check before 2026-11-25."""
    return bool(torch.isfinite(tensor).all())


def new_all_finite(tensor: torch.Tensor) -> bool:
    """fedhet.engine.divergence's test: a finite sum, else the entries."""
    return bool(torch.isfinite(tensor.sum())) or bool(torch.isfinite(tensor).all())


def legacy_change(new_rows: torch.Tensor, old_rows: torch.Tensor) -> torch.Tensor:
    """MIFA/FedVarp's change of the running sum before 2026-11-25."""
    return (new_rows.to(torch.float64) - old_rows.to(torch.float64)).sum(dim=0)


def legacy_weighted_row_sum(table: torch.Tensor, coefficients: torch.Tensor, rows_per_block: int) -> torch.Tensor:
    """``weighted_row_sum`` before 2026-11-25 on one thread, float32: a block with fewer than half its
    coefficients non-zero copies only those rows into a cache-sized buffer, piece by piece."""
    num_rows, dim = table.shape
    total = torch.zeros(dim, dtype=torch.float32)
    blocks = []
    for start in range(0, num_rows, rows_per_block):
        stop = min(start + rows_per_block, num_rows)
        block = coefficients[start:stop]
        nonzero = torch.nonzero(block != 0).flatten()
        if nonzero.numel() == 0:
            continue
        as_view = nonzero.numel() >= VIEW_SHARE * (stop - start)
        blocks.append((start, stop, block.to(torch.float32), None if as_view else nonzero))
    if not blocks:
        return total
    buffer_rows = max(stop - start for start, stop, _, _ in blocks)
    width = max(ALIGN, (BUFFER_BYTES // (4 * buffer_rows)) // ALIGN * ALIGN)
    buffer = torch.empty(buffer_rows, width)
    for start, stop, block_coefficients, nonzero in blocks:
        if nonzero is None:
            total += block_coefficients @ table[start:stop]
            continue
        block_rows = buffer[:stop - start]
        block_rows.zero_()
        for column in range(0, dim, width):
            end = min(column + width, dim)
            rows = block_rows[:, :end - column]
            rows[nonzero] = table[start:stop, column:end].index_select(0, nonzero)
            total[column:end] += block_coefficients @ rows
    return total


def cpu_ms(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        began = time.process_time()
        fn()
        times.append(time.process_time() - began)
    return 1e3 * statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    rows = []

    def record(kernel: str, size: str, before: float, after: float, same: bool) -> None:
        rows.append({"kernel": kernel, "size": size, "before_ms": before, "after_ms": after, "bitwise_equal": same})
        print(f"{kernel:<32} {size:<34} before {before:7.2f} ms  after {after:7.2f} ms  "
              f"({before / max(after, 1e-9):.1f}x)  same result: {same}", flush=True)

    deltas = torch.randn(10, 199_210, generator=generator)
    model = torch.randn(199_210, generator=generator)
    for name, tensor in (("cohort deltas [10, 199210]", deltas), ("model [199210]", model)):
        record("divergence: all finite", name, cpu_ms(lambda: legacy_all_finite(tensor), args.repeats),
               cpu_ms(lambda: new_all_finite(tensor), args.repeats),
               legacy_all_finite(tensor) == new_all_finite(tensor))

    new, old = torch.randn(10, 199_210, generator=generator), torch.randn(10, 199_210, generator=generator)
    record("MIFA/FedVarp running sum", "K = 10, d = 199210", cpu_ms(lambda: legacy_change(new, old), args.repeats),
           cpu_ms(lambda: change_of_rows(new, old), args.repeats),
           torch.equal(legacy_change(new, old), change_of_rows(new, old)))

    for num_clients, dim, rows_per_block in ((100, 199_210, 100), (1000, 100_000, 167), (300, 1_000_000, 16)):
        table = torch.randn(num_clients, dim, generator=generator)
        for nonzero in (1, 9, num_clients // 4):
            weights = torch.zeros(num_clients, dtype=torch.float64)
            picked = torch.randperm(num_clients, generator=generator)[:nonzero]
            weights[picked] = torch.rand(nonzero, generator=generator, dtype=torch.float64)

            def after():
                return weighted_row_sum(table, weights, compute_dtype=torch.float32, rows_per_block=rows_per_block)

            def before():
                return legacy_weighted_row_sum(table, weights, rows_per_block)
            record("FedAWARE weighted sum (float32)", f"N = {num_clients}, d = {dim}, {nonzero} non-zero",
                   cpu_ms(before, args.repeats), cpu_ms(after, args.repeats), torch.equal(before(), after()))
        del table

    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"machine": machine(f"torch {torch.__version__}"), "threads": 1, "repeats": args.repeats,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": "benchmarks/bench_bookkeeping.py " + " ".join(argv or sys.argv[1:])}
    (out / f"bookkeeping-{stamp}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = [f"# Per-round bookkeeping, before and after ({meta['date']})", "", f"Machine: {meta['machine']}; one thread; "
             f"medians of {args.repeats} calls, CPU ms", "", "| kernel | size | before ms | after ms | speed-up | same bits |",
             "| --- | --- | ---: | ---: | ---: | --- |"]
    lines += [f"| {r['kernel']} | {r['size']} | {r['before_ms']:.2f} | {r['after_ms']:.2f} | "
              f"{r['before_ms'] / max(r['after_ms'], 1e-9):.1f}x | {r['bitwise_equal']} |" for r in rows]
    (out / f"bookkeeping-{stamp}.md").write_text("\n".join(lines) + "\n")
    print(f"bench_bookkeeping: wrote {out / f'bookkeeping-{stamp}.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
