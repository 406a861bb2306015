"""Curves over rounds with seed bands: test accuracy, train loss, e-LUD and (when clients were
evaluated) the worst-10% client accuracy per row of a section, and the same curves as small
multiples, one panel per section.

For one group (the seeds of one setting) a curve is taken at the x values (rounds; ``x_key`` names
another record key, e.g. a virtual time) that every seed evaluated with a finite value; the line is
the mean over seeds and the band mean ± sample std (``ddof = 1``; no band for one seed). A method
keeps one colour in every figure of a report (:func:`method_colours`). Figures use matplotlib's Agg
canvas (no pyplot state, no display) and are written with :func:`fedhet.core.io.atomic_savefig`.
"""
from __future__ import annotations

import dataclasses
import math
import os
import textwrap
from typing import Any, Optional, Sequence

import numpy as np

from fedhet.core import atomic_savefig
from fedhet.lab.report.grouping import Group

CURVES = {
    "test_accuracy": ("test accuracy", "test accuracy"),
    "train_loss": ("train loss", "train loss (mean local minibatch loss)"),
    "e_lud": ("e-LUD", "e-LUD (local update diversity)"),
    # Only runs with per-client evaluation (run.client_eval_every > 0) have it; otherwise no plot.
    "client_accuracy_worst10": ("worst-10% client accuracy",
                                "worst-10% client accuracy"),
}
X_LABELS = {"round": "round"}


@dataclasses.dataclass(frozen=True)
class Band:
    rounds: np.ndarray
    mean: np.ndarray
    std: np.ndarray          # zeros when there is a single seed
    seeds: int


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def seed_band(group: Group, key: str, x_key: str = "round") -> Band:
    """Mean and sample std of ``key`` across the group's seeds at the ``x_key`` values every seed has."""
    per_run = []
    for run in group.runs:
        per_run.append({r[x_key]: float(r[key]) for r in run.records if _number(r.get(key)) and _number(r.get(x_key))})
    common = sorted(set.intersection(*(set(values) for values in per_run))) if per_run else []
    if not common:
        return Band(np.zeros(0), np.zeros(0), np.zeros(0), len(per_run))
    matrix = np.array([[values[t] for t in common] for values in per_run], dtype=np.float64)
    std = matrix.std(axis=0, ddof=1) if len(per_run) > 1 else np.zeros(len(common))
    return Band(np.array(common), matrix.mean(axis=0), std, len(per_run))


def method_colours(groups: Sequence[Group]) -> dict[str, Any]:
    """One colour per row label (the method or variant), in order of first appearance, so a method
    has the same colour in every panel and figure of a report."""
    labels = list(dict.fromkeys(group.label for group in groups))
    return dict(zip(labels, distinct_colours(len(labels))))


def _draw_bands(axes, groups: Sequence[Group], key: str, colours: dict[str, Any], x_key: str) -> bool:
    """Lines and bands of ``groups`` on ``axes``; False when none has data. Rows that share a label
    (a grid over a value) keep the label's colour and get line styles of their own."""
    drawn, styles, seen = False, ("-", "--", ":", "-."), {}
    for group in groups:
        band = seed_band(group, key, x_key)
        if not len(band.rounds):
            continue
        colour = colours.get(group.label) or distinct_colours(1)[0]
        count = seen.get(group.label, 0)
        seen[group.label] = count + 1
        style = styles[count % len(styles)]
        axes.plot(band.rounds, band.mean, color=colour, linewidth=1.4, linestyle=style,
                  label=f"{group.display or group.label} (n={band.seeds})")
        if band.seeds > 1:
            axes.fill_between(band.rounds, band.mean - band.std, band.mean + band.std, color=colour, alpha=0.18,
                              linewidth=0)
        drawn = True
    return drawn


def plot_curves(groups: Sequence[Group], key: str, path: str | os.PathLike, *, title: str,
                colours: Optional[dict[str, Any]] = None, x_key: str = "round") -> bool:
    """Draw one line (and band) per group for ``key`` over ``x_key``; False (nothing written) when no
    group has data. ``colours``: label -> colour (default :func:`method_colours` of ``groups``)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not any(len(seed_band(group, key, x_key).rounds) for group in groups):
        return False
    figure = Figure(figsize=(8.0, 4.2), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    _draw_bands(axes, groups, key, colours or method_colours(groups), x_key)
    axes.set_xlabel(X_LABELS.get(x_key, x_key))
    axes.set_ylabel(CURVES.get(key, (key, key))[1])
    axes.set_title(wrapped_title(title), fontsize=10)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    atomic_savefig(figure, path, dpi=100)
    return True


# Panels per row of a small-multiples figure, and each panel's size in inches.
PANEL_COLUMNS = 3
PANEL_SIZE = (4.0, 3.0)


def plot_small_multiples(panels: Sequence[tuple[str, Sequence[Group]]], key: str, path: str | os.PathLike, *,
                         title: str, colours: dict[str, Any], x_key: str = "round") -> bool:
    """One panel per ``(title, groups)`` (a section of the report) for ``key``, shared y axis, one
    legend naming each method once in its fixed colour; False (nothing written) without data."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    panels = [(name, groups) for name, groups in panels
              if any(len(seed_band(group, key, x_key).rounds) for group in groups)]
    if not panels:
        return False
    columns = min(PANEL_COLUMNS, len(panels))
    rows = math.ceil(len(panels) / columns)
    figure = Figure(figsize=(PANEL_SIZE[0] * columns + 1.8, PANEL_SIZE[1] * rows + 0.6), layout="constrained")
    FigureCanvasAgg(figure)
    grid = figure.subplots(rows, columns, sharey=True, squeeze=False)
    for index, (name, groups) in enumerate(panels):
        axes = grid[index // columns][index % columns]
        _draw_bands(axes, groups, key, colours, x_key)
        axes.set_title(wrapped_title(name, width=45), fontsize=8)
        axes.grid(True, alpha=0.3)
        axes.set_xlabel(X_LABELS.get(x_key, x_key), fontsize=8)
        axes.tick_params(labelsize=7)
    for index in range(len(panels), rows * columns):
        grid[index // columns][index % columns].set_visible(False)
    for row in grid:
        row[0].set_ylabel(CURVES.get(key, (key, key))[0], fontsize=8)
    shown = list(dict.fromkeys(group.label for _name, groups in panels for group in groups))
    handles = [Line2D([], [], color=colours.get(label, distinct_colours(1)[0]), linewidth=2, label=label) for label in shown]
    figure.legend(handles=handles, loc="outside right upper", fontsize=8, frameon=False)
    figure.suptitle(wrapped_title(title, width=100), fontsize=10)
    atomic_savefig(figure, path, dpi=100)
    return True


# Characters per title line: at fontsize 10 a line this long fits over the axes of an 8-inch figure
# whose legend takes the right third, so a long setting wraps instead of running off both ends.
TITLE_WIDTH = 70


def wrapped_title(title: str, width: int = TITLE_WIDTH) -> str:
    """``title`` broken into lines of at most ``width`` characters (at spaces; longer words are split)."""
    return "\n".join(textwrap.wrap(title, width=width, break_on_hyphens=False)) or title


def distinct_colours(count: int) -> list:
    """``count`` colours of matplotlib's tab10 (tab20 above ten), repeating past the map's size."""
    from matplotlib import colormaps

    cmap = colormaps["tab10" if count <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(count)]
