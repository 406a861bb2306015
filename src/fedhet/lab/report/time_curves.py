"""Curves against virtual time: test accuracy over the virtual clock's seconds (docs/system.md).

For runs with a ``[system]`` section every record has ``virtual_seconds`` (the clock at the end of
the round). Per group, the curve is taken at the rounds every seed evaluated; x is the mean over
seeds of ``virtual_seconds`` at that round (seeds of one setting draw the same profiles but
different cohorts, so their clocks differ a little) and y the mean test accuracy, with a band of
± the sample std of the accuracy. Groups without a clock are left out; with no clocked group no
figure is written.
"""
from __future__ import annotations

import math
import os
from typing import Sequence

import numpy as np

from fedhet.core import atomic_savefig
from fedhet.lab.report.grouping import Group
from fedhet.lab.report.plots import distinct_colours, wrapped_title

# Plot keys of the report's sections drawn here, and their captions.
TIME_CURVES = {"test_accuracy_time": "test accuracy over virtual seconds: mean over seeds, band = ± sample std"}


def time_band(group: Group, key: str = "test_accuracy") -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """``(seconds, mean, std, seeds)`` of ``key`` against mean virtual seconds (module docstring)."""
    per_run = []
    for run in group.runs:
        per_run.append({int(r["round"]): (float(r["virtual_seconds"]), float(r[key])) for r in run.records
                        if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])
                        and isinstance(r.get("virtual_seconds"), (int, float))})
    common = sorted(set.intersection(*(set(values) for values in per_run))) if per_run else []
    if not common:
        return np.zeros(0), np.zeros(0), np.zeros(0), len(per_run)
    seconds = np.array([[values[t][0] for t in common] for values in per_run], dtype=np.float64)
    matrix = np.array([[values[t][1] for t in common] for values in per_run], dtype=np.float64)
    std = matrix.std(axis=0, ddof=1) if len(per_run) > 1 else np.zeros(len(common))
    return seconds.mean(axis=0), matrix.mean(axis=0), std, len(per_run)


def plot_accuracy_against_time(groups: Sequence[Group], path: str | os.PathLike, *, title: str) -> bool:
    """Test accuracy against virtual seconds, one line per clocked group; False when none has a clock."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    bands = [(group, time_band(group)) for group in groups]
    if not any(len(band[0]) for _group, band in bands):
        return False
    figure = Figure(figsize=(8.0, 4.2), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for (group, (seconds, mean, std, seeds)), colour in zip(bands, distinct_colours(len(bands))):
        if not len(seconds):
            continue
        axes.plot(seconds, mean, color=colour, linewidth=1.4, label=f"{group.display or group.label} (n={seeds})")
        if seeds > 1:
            axes.fill_between(seconds, mean - std, mean + std, color=colour, alpha=0.18, linewidth=0)
    axes.set_xlabel("virtual seconds")
    axes.set_ylabel("test accuracy")
    axes.set_title(wrapped_title(title), fontsize=10)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    atomic_savefig(figure, path, dpi=100)
    return True
