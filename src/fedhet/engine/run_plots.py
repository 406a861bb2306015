"""The files of a run drawn from its federation and participation: ``partition.csv``/``.png``,
``participation.pt``/``.png`` and ``participation_probabilities.png``, each written atomically.

The ``.png`` files are drawn after the last round (:mod:`fedhet.engine.runner`): importing matplotlib
and drawing take about 1 s, which would delay round 1.
"""
from __future__ import annotations

from fedhet.core.io import atomic_torch_save
from fedhet.engine.run_handle import RunHandle


def write_partition_report(handle: RunHandle) -> None:
    """``partition.csv``, the per-client label counts (written once, at the start of a new run)."""
    from fedhet.data.partition_report import write_label_report

    write_label_report(handle.federation.label_counts, handle.run_dir / "partition.csv")


def write_partition_plot(handle: RunHandle) -> None:
    """``partition.png``, the heat map of ``partition.csv``. Drawn after the rounds, beside the
    participation plots: importing matplotlib and drawing take about 1 s, which would delay round 1;
    the counts do not change during a run, so the picture is the same."""
    from fedhet.data.partition_report import plot_label_heatmap

    counts = handle.federation.label_counts
    plot_label_heatmap(counts, handle.run_dir / "partition.png",
                       title=f"{handle.config.data.name}: {handle.config.partition.name} over {len(counts)} clients")


def write_participation(handle: RunHandle) -> None:
    """``participation.pt`` (who trained in which round), its raster ``participation.png`` and, for a
    heterogeneous process, the histogram of its probabilities (after the rounds)."""
    log = handle.participation_log[:handle.next_round]
    atomic_torch_save(handle.run_dir / "participation.pt", log)
    from fedhet.participation.plots import plot_participation_raster, plot_probability_histogram

    if handle.next_round > 0:
        plot_participation_raster(log, handle.run_dir / "participation.png",
                                  title=f"participation ({handle.config.participation.name})")
    simulator = handle.simulator
    probabilities = simulator.process.probabilities(simulator.participation_state)
    if probabilities is not None and handle.config.participation.name == "heterogeneous":
        # The distribution of p_n (FedAU paper, Figure C.6.1); constant for homogeneous processes.
        plot_probability_histogram(probabilities.cpu(), handle.run_dir / "participation_probabilities.png")
