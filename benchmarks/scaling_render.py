"""Scaling, rendered: the Markdown tables of docs/scaling.md and its two plots, from a result file that
``benchmarks/scaling.py`` wrote. Nothing is measured here, so the docs can be redrawn from a committed
result without repeating the timings.

Usage (from the repository root):

    python benchmarks/scaling_render.py RESULT                    # print the Markdown tables
    python benchmarks/scaling_render.py RESULT --plots DIR        # and write scaling-K.png, scaling-N.png to DIR

``benchmarks/scaling.py`` calls :func:`write_plots` after measuring (into ``docs/images``), and its
``--tables RESULT`` is this script's first form.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Optional


def methods_of(rows: list[dict[str, Any]]) -> list[str]:
    """The methods of a timing axis in the order they were measured (each point times every method of
    ``scaling.METHODS``, first to last), read from the rows so that rendering needs no measurement code."""
    return list(dict.fromkeys(row["method"] for row in rows))


def plot(rows: list[dict[str, Any]], axis: str, path: Path, title: str) -> None:
    """One timing axis's seconds per round against K or N, a line per method, log-log."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for method in methods_of(rows):
        points = [r for r in rows if r["method"] == method and not r.get("skipped")]
        ax.plot([r[axis] for r in points], [r["seconds_per_round"] for r in points], "o-", label=method)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("cohort size K (N = 1,000)" if axis == "K" else "clients N (K = 10, stores memory-mapped)")
    ax.set_ylabel("seconds per round (median)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    ax.set_title(title, fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def markdown_tables(result: dict[str, Any]) -> str:
    """The tables of docs/scaling.md from a result file."""
    lines = []
    methods = methods_of(result["K"])

    def timing(axis: str) -> None:
        lines.append(f"| {axis} | " + " | ".join(methods) + " |")
        lines.append("| ---: |" + " ---: |" * len(methods))
        for value in sorted({r[axis] for r in result[axis]}):
            cells = []
            for method in methods:
                [row] = [r for r in result[axis] if r[axis] == value and r["method"] == method]
                cells.append(f"not run ({row['predicted_dense_server_state_bytes'] / 2**30:.0f} GiB state)"
                             if row.get("skipped") else f"{row['seconds_per_round'] * 1000:.1f}")
            lines.append(f"| {value:,} | " + " | ".join(cells) + " |")
        lines.append("")

    lines += ["Milliseconds per round (median), against K (N = 1,000):", ""]
    timing("K")
    lines += ["Milliseconds per round (median), against N (K = 10, stores memory-mapped):", ""]
    timing("N")
    lines += ["Memory and checkpoint at each N (K = 10):", "",
              "| N | method | stores (MB) | dense server state (MB) | checkpoint (MB) | checkpoint write (s) |",
              "| ---: | --- | ---: | ---: | ---: | ---: |"]
    for row in result["N"]:
        if not row.get("skipped"):
            lines.append(f"| {row['N']:,} | {row['method']} | {row['store_bytes'] / 1e6:.1f} | "
                         f"{row['dense_server_state_bytes'] / 1e6:.1f} | {row['checkpoint_bytes'] / 1e6:.1f} | "
                         f"{row['checkpoint_seconds']:.3f} |")
    lines += ["", "Per-client `[N, d]` stores of each method (counted on a 12-client run):", "",
              "| method | client stores | server stores | broadcast vectors |", "| --- | --- | --- | ---: |"]
    for name, row in result["stores"].items():
        if "error" in row:
            lines.append(f"| {name} | ({row['error']}) | | |")
        else:
            lines.append(f"| {name} | {', '.join(row['client']) or '-'} | {', '.join(row['server']) or '-'} | "
                         f"{row.get('broadcast_vectors', 0):g} |")
    a = result["assumptions"]
    lines += ["", f"The papers' presets on {a['nodes']} nodes of one GPU each (GPU at {a['gpu_tflops']:g} TFLOP/s "
              f"sustained, assumed; CPU at the measured {result['cpu_training_rate']['achieved_gflops_one_thread']:.1f} "
              f"GFLOP/s per core; {a['step_overhead_seconds'] * 1000:.2f} ms of overhead per local step, measured; "
              f"lr grid of {a['lr_grid']}):", "",
              "| preset | model | d | N | E[K] | steps/client | GFLOP/example (train) | TFLOP/round | rounds | runs | "
              "GPU-h | CPU-core-h | GPU-h x lr grid | wall h on the cluster (x lr grid) |",
              "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for p in result["presets"]:
        lines.append(f"| {p['preset']} | {p['model']} | {p['d']:,} | {p['N']} | {p['expected_cohort']:g} | "
                     f"{p['local_steps']:g} | {p['train_gflop_per_example']:.3f} | {p['round_tflop']:.2f} | {p['rounds']:,} | "
                     f"{p['runs']} | {p['gpu_hours']:,.1f} | {p['cpu_core_hours']:,.0f} | {p['gpu_hours_with_lr_grid']:,.0f} | "
                     f"{p['wall_hours_one_gpu_per_run']:.2f} ({p['wall_hours_with_lr_grid']:.2f}) |")
    lines += ["", "Bytes per round and store memory of each preset's methods (float32):", "",
              "| preset | method | client stores | server stores | store memory (GiB) | processes (MB/round) | "
              "ray (MB/round) | ray link time per round (s) |",
              "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |"]
    for p in result["presets"]:
        for m in p["methods"]:
            ray_bytes = m["round_bytes"]["ray"]
            lines.append(f"| {p['preset']} | {m['method']} | {', '.join(m['client_stores']) or '-'} | "
                         f"{', '.join(m['server_stores']) or '-'} | {m['store_gib']:.1f} | "
                         f"{m['round_bytes']['processes'] / 1e6:,.0f} | {ray_bytes / 1e6:,.0f} | "
                         f"{ray_bytes * 8 / (a['bandwidth_gbit'] * 1e9):.2f} |")
    return "\n".join(lines) + "\n"


def write_plots(result: dict[str, Any], directory: Path) -> None:
    """``scaling-K.png`` and ``scaling-N.png`` of a result with timings, titled with its date."""
    title = f"fedhet sequential, logreg on Synthetic, {result['meta']['date']} (shared machine, noisy)"
    plot(result["K"], "K", directory / "scaling-K.png", title)
    plot(result["N"], "N", directory / "scaling-N.png", title)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("result", metavar="RESULT", help="a scaling-<timestamp>.json of benchmarks/scaling.py")
    parser.add_argument("--plots", metavar="DIR", help="also write the two plots to DIR (docs/images for the docs)")
    args = parser.parse_args(argv)
    result = json.loads(Path(args.result).read_text())
    if "K" not in result or "N" not in result:
        # The tables start with the timings; a --skip-timing result has none.
        print(f"scaling_render: {args.result} has no timings (written with --skip-timing); nothing to render",
              file=sys.stderr)
        return 2
    if args.plots:
        write_plots(result, Path(args.plots))
    print(markdown_tables(result), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
