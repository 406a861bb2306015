"""A forest plot: one row per comparison, its difference with a confidence interval and a delta band.

Each row draws the difference as a dot and the interval ``[lo, hi]`` as a horizontal bar, coloured by
its outcome (:data:`OUTCOME_COLOURS`); zero is a solid vertical line and, when the row has a minimal
effect ``delta``, the band between 0 and ``delta`` is shaded so a reader sees at once whether the
interval clears zero and reaches ``delta`` (holds), clears zero but stays short of ``delta`` (smaller than
claimed), lies left of zero (contradicted), or reaches zero and stays short of ``delta`` (not reproduced):
the verdict rule of docs/claims.md, "The verdict rule". A row whose difference or interval is
not finite (one seed, a missing run) keeps its label and gets no bar, so the rows stay aligned with
the table beside them.

The module is generic: ``fedhet claims report`` and ``fedhet report --baseline`` both draw with it.
Figures use matplotlib's Agg canvas (no pyplot state, no display) and are written atomically with
:func:`fedhet.core.io.atomic_savefig`.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Sequence

from fedhet.core import atomic_savefig

# Outcome -> colour. The names are the verdict rule's per-comparison outcomes (docs/claims.md);
# "not tested" is a comparison below its protocol's regime, drawn light so it reads as a trend only.
OUTCOME_COLOURS: dict[str, str] = {
    "holds": "#2e7d32",
    "smaller than claimed": "#9e9d24",
    "contradicted": "#c62828",
    "not reproduced": "#ef6c00",
    "inconclusive": "#757575",
    "not tested": "#bdbdbd",
}
# An outcome not in the table (a caller's own word) is drawn in the inconclusive grey.
FALLBACK_COLOUR = OUTCOME_COLOURS["inconclusive"]


@dataclasses.dataclass(frozen=True)
class ForestRow:
    """One comparison: ``difference`` (method minus baseline, oriented so that positive is better),
    its interval ``[lo, hi]``, the minimal effect ``delta`` (None: no band) and the ``outcome`` word."""

    label: str
    difference: float
    lo: float
    hi: float
    delta: float | None
    outcome: str


def _finite(*values: float | None) -> bool:
    return all(v is not None and math.isfinite(v) for v in values)


def forest_plot(rows: Sequence[ForestRow], path: Path, *, title: str = "", metric: str = "") -> Path:
    """Draw ``rows`` top to bottom into a PNG at ``path`` (written atomically) and return ``path``.

    ``metric`` labels the x axis (the difference's units); ``title`` is drawn above the axes.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    path = Path(path)
    count = max(len(rows), 1)
    # About a quarter inch per row keeps labels legible at 100 dpi without a tall page for few rows. The
    # width grows with the longest label (about 0.07 inch a character at the tick font size), so the
    # intervals keep about 5 inches however long the comparisons' names are.
    longest = max((len(row.label) for row in rows), default=0)
    figure = Figure(figsize=(max(8.0, 5.0 + 0.07 * longest), 1.2 + 0.28 * count), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for index, row in enumerate(rows):
        y = count - 1 - index
        colour = OUTCOME_COLOURS.get(row.outcome, FALLBACK_COLOUR)
        if row.delta is not None and _finite(row.delta) and row.delta != 0:
            low, high = sorted((0.0, float(row.delta)))
            axes.fill_between([low, high], y - 0.38, y + 0.38, color="#90caf9", alpha=0.35, linewidth=0)
        if _finite(row.lo, row.hi):
            axes.plot([row.lo, row.hi], [y, y], color=colour, linewidth=2.2, solid_capstyle="butt")
        if _finite(row.difference):
            axes.plot([row.difference], [y], marker="o", markersize=5, color=colour)
    axes.axvline(0.0, color="black", linewidth=0.8)
    axes.set_yticks(range(count))
    axes.set_yticklabels([row.label for row in reversed(rows)] if rows else [""], fontsize=8)
    axes.set_ylim(-0.7, count - 0.3)
    axes.set_xlabel(f"difference ({metric})" if metric else "difference")
    if title:
        axes.set_title(title, fontsize=10)
    axes.grid(True, axis="x", alpha=0.3)
    shown = list(dict.fromkeys(row.outcome for row in rows))
    handles = [Patch(color=OUTCOME_COLOURS.get(o, FALLBACK_COLOUR), label=o) for o in shown]
    if any(_finite(row.delta) and row.delta != 0 for row in rows):
        handles.append(Patch(color="#90caf9", alpha=0.35, label="0 to delta"))
    if handles:
        axes.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    atomic_savefig(figure, path, dpi=100)
    return path
