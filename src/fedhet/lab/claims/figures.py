"""A claim's curves as small multiples: one panel per setting, a few lines per panel, shared y axis.

A claim that reads several protocols (FedAU's three participation patterns, the hybrid paper's three
heterogeneity settings) gets one panel per protocol holding the claim's methods in it; a claim on one
protocol with more methods than :data:`MAX_LINES` (AWARE's four raw/xAWARE pairs) gets one panel per
compared pair instead, so no panel carries more lines than a reader can tell apart. Each line is the mean
over seeds with a ± sample std band (:func:`fedhet.lab.report.plots.seed_band`). Figures use
matplotlib's Agg canvas and are written atomically (:func:`fedhet.core.io.atomic_savefig`).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

from fedhet.core import atomic_savefig
from fedhet.lab.claims.definitions import Side
from fedhet.lab.claims.evaluate import ClaimResult
from fedhet.lab.report.grouping import Group
from fedhet.lab.report.plots import CURVES, seed_band, wrapped_title

MAX_LINES = 6


def panels(result: ClaimResult) -> list[tuple[str, list[tuple[Side, tuple]]]]:
    """``(panel title, [(side, runs), ...])`` in the claim's order of first use (module docstring)."""
    sides: dict[Side, tuple] = {}
    for c in result.comparisons:
        for values in (c.method, c.baseline):
            sides.setdefault(values.side, values.runs)
    protocols = list(dict.fromkeys(side.protocol for side in sides))
    if len(protocols) == 1 and len(sides) > MAX_LINES:
        out, seen = [], set()
        for c in result.comparisons:
            pair = (c.method.side, c.baseline.side)
            if pair not in seen:
                seen.add(pair)
                out.append((f"{pair[0].method} vs {pair[1].method}", [(s, sides[s]) for s in pair]))
        return out
    return [(protocol, [(s, runs) for s, runs in sides.items() if s.protocol == protocol]) for protocol in protocols]


def plot_small_multiples(result: ClaimResult, key: str, path: Path) -> bool:
    """Draw ``key`` (``test_accuracy``, ``e_lud``) of the claim's runs as panels; False when no run has data."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    layout = panels(result)
    bands = [(title, [(side, seed_band(Group(side.text, {}, list(runs)), key)) for side, runs in entries if runs])
             for title, entries in layout]
    if not any(len(band.rounds) for _title, entries in bands for _side, band in entries):
        return False
    columns = min(3, len(bands))
    rows = math.ceil(len(bands) / columns)
    # at least 7.5 inches wide, so that one panel is as legible as three and the title fits
    figure = Figure(figsize=(max(7.5, 3.6 * columns + 0.4), 2.9 * rows + 0.6), layout="constrained")
    FigureCanvasAgg(figure)
    grid = figure.subplots(rows, columns, sharey=True, squeeze=False)
    methods = list(dict.fromkeys(side.method for _title, entries in bands for side, _band in entries))
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    colour = {method: cmap(i % 10) for i, method in enumerate(methods)}
    for index, axes in enumerate(grid.flat):
        if index >= len(bands):
            axes.set_visible(False)
            continue
        title, entries = bands[index]
        for side, band in entries:
            if not len(band.rounds):
                continue
            axes.plot(band.rounds, band.mean, color=colour[side.method], linewidth=1.3,
                      label=f"{side.method} (n={band.seeds})")
            if band.seeds > 1:
                axes.fill_between(band.rounds, band.mean - band.std, band.mean + band.std, color=colour[side.method],
                                  alpha=0.18, linewidth=0)
        axes.set_title(wrapped_title(title, 40), fontsize=9)
        axes.set_xlabel("round", fontsize=8)
        axes.tick_params(labelsize=7)
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=6.5, loc="best", frameon=False)
    grid.flat[0].set_ylabel(CURVES.get(key, (key, key))[0], fontsize=8)
    figure.suptitle(wrapped_title(f"{result.claim.id}: {CURVES.get(key, (key, key))[0]} (mean over seeds, "
                                  "band ± sample std)"), fontsize=10)
    atomic_savefig(figure, path, dpi=100)
    return True


def claim_figures(results: Sequence[ClaimResult], plots_dir: Path) -> dict[str, list[tuple[str, Path]]]:
    """Per claim, ``(caption, png)``: its test-accuracy panels, and e-LUD panels when it compares e-LUDD."""
    plots_dir.mkdir(parents=True, exist_ok=True)
    for stale in plots_dir.glob("claim_*.png"):
        stale.unlink()
    plots: dict[str, list[tuple[str, Path]]] = {}
    for result in results:
        keys = ["test_accuracy"] + (["e_lud"] if any(c.comparison.metric == "e_ludd" for c in result.comparisons)
                                    else [])
        plots[result.claim.id] = []
        for key in keys:
            path = plots_dir / f"claim_{result.claim.id}_{key}.png"
            if plot_small_multiples(result, key, path):
                name = CURVES.get(key, (key, key))[0]
                plots[result.claim.id].append((f"{result.claim.id}: {name} over rounds, one panel per setting "
                                               "(mean over seeds, band = ± sample std)", path))
    return plots
