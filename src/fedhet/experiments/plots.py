"""Curves over rounds with seed bands: test accuracy, train loss and e-LUD per row of a section.

For one group (the seeds of one setting) a curve is taken at the rounds that every seed evaluated
with a finite value; the line is the mean over seeds and the band mean ± sample std (``ddof = 1``;
no band for one seed). Figures use matplotlib's Agg canvas (no pyplot state, no display) and are
written with :func:`fedhet.core.io.atomic_savefig`.
"""
from __future__ import annotations

import dataclasses
import math
import os
import textwrap
from typing import Sequence

import numpy as np

from fedhet.core.io import atomic_savefig
from fedhet.experiments.grouping import Group

CURVES = {
    "test_accuracy": ("test accuracy", "test accuracy"),
    "train_loss": ("train loss", "train loss (mean local minibatch loss)"),
    "e_lud": ("e-LUD", "e-LUD (local update diversity)"),
}


@dataclasses.dataclass(frozen=True)
class Band:
    rounds: np.ndarray
    mean: np.ndarray
    std: np.ndarray          # zeros when there is a single seed
    seeds: int


def seed_band(group: Group, key: str) -> Band:
    """Mean and sample std of ``key`` across the group's seeds at the rounds every seed has."""
    per_run = []
    for run in group.runs:
        per_run.append({int(r["round"]): float(r[key]) for r in run.records
                        if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])})
    common = sorted(set.intersection(*(set(values) for values in per_run))) if per_run else []
    if not common:
        return Band(np.zeros(0), np.zeros(0), np.zeros(0), len(per_run))
    matrix = np.array([[values[t] for t in common] for values in per_run], dtype=np.float64)
    std = matrix.std(axis=0, ddof=1) if len(per_run) > 1 else np.zeros(len(common))
    return Band(np.array(common), matrix.mean(axis=0), std, len(per_run))


def plot_curves(groups: Sequence[Group], key: str, path: str | os.PathLike, *, title: str) -> bool:
    """Draw one line (and band) per group for ``key``; False (nothing written) when no group has data."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    bands = [(group, seed_band(group, key)) for group in groups]
    if not any(len(band.rounds) for _group, band in bands):
        return False
    figure = Figure(figsize=(8.0, 4.2), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    colours = _colours(len(bands))
    for (group, band), colour in zip(bands, colours):
        if not len(band.rounds):
            continue
        label = f"{group.display or group.label} (n={band.seeds})"
        axes.plot(band.rounds, band.mean, color=colour, linewidth=1.4, label=label)
        if band.seeds > 1:
            axes.fill_between(band.rounds, band.mean - band.std, band.mean + band.std, color=colour, alpha=0.18,
                              linewidth=0)
    ylabel = CURVES.get(key, (key, key))[1]
    axes.set_xlabel("round")
    axes.set_ylabel(ylabel)
    axes.set_title(wrapped_title(title), fontsize=10)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    atomic_savefig(figure, path, dpi=100)
    return True


# Characters per title line: at fontsize 10 a line this long fits over the axes of an 8-inch figure
# whose legend takes the right third, so a long setting wraps instead of running off both ends.
TITLE_WIDTH = 70


def wrapped_title(title: str, width: int = TITLE_WIDTH) -> str:
    """``title`` broken into lines of at most ``width`` characters (at spaces; longer words are split)."""
    return "\n".join(textwrap.wrap(title, width=width, break_on_hyphens=False)) or title


def _colours(count: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if count <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(count)]
