"""``fedhet report --baseline NAME``: each row of a table against the baseline row, paired by seed.

For a row and a metric (the final and the last-window accuracy), the seeds that both the row and the
baseline ran are paired and the differences ``row_s - baseline_s`` summarised by
:func:`fedhet.lab.report.difference.paired_difference` (mean, sample std, two-sided 95%
Student-t interval): the rule of the claims' verdicts (docs/claims.md), without a claim's margin.
The outcome uses the claims report's words, read as "the row is better than the baseline":

- ``holds``: the interval lies above 0 (better);
- ``contradicted``: the interval lies below 0 (worse);
- ``inconclusive``: the interval contains 0, or fewer than two seeds pair.

Differences are in accuracy points (percentage points in the tables). The forest plot is the claims
report's (:func:`fedhet.lab.report.forest.forest_plot`).

In a section of runs with a virtual clock (docs/system.md) the virtual seconds to the first target are
compared too, over the seeds on which both the row and the baseline reached it; fewer seconds is
better, so ``holds`` is an interval below 0 and ``contradicted`` one above.

The baseline is the row whose name (or label, when one row of the table has it) is ``NAME``. A table
without it gets a note instead of a comparison; a name that no table has is an input error.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

from fedhet.lab.report.data import Row
from fedhet.lab.report.difference import Difference, paired_difference
from fedhet.lab.report.runs import RunDirectoryError

BASELINE_METRICS = ("final_accuracy", "last_accuracy")
TIME_TO_TARGET = "virtual_seconds_to_target"     # lower is better
HOLDS, CONTRADICTED, INCONCLUSIVE = "holds", "contradicted", "inconclusive"
NOTE = ("Paired by seed: row minus baseline, mean and two-sided 95% Student-t interval over the seeds both ran "
        "(percentage points). holds: the interval lies above 0 (better than the baseline); contradicted: below "
        "0 (worse); inconclusive: it contains 0, or fewer than two seeds pair.")
TIME_NOTE = (" Virtual seconds to the target: over the seeds on which both reached it; fewer is better (holds: "
             "the interval lies below 0).")


@dataclasses.dataclass(frozen=True)
class Comparison:
    row: str
    metric: str
    difference: Difference
    outcome: str


@dataclasses.dataclass(frozen=True)
class BaselineTable:
    """A table's comparisons against its baseline row (``baseline`` None: the table has no such row)."""

    name: str                         # what --baseline asked for
    baseline: Optional[str]           # the matching row's name
    comparisons: tuple[Comparison, ...]


def table_note(table: BaselineTable) -> str:
    """The note above a comparison table: the rule, and the virtual-time rule when the table has it."""
    return NOTE + (TIME_NOTE if any(c.metric == TIME_TO_TARGET for c in table.comparisons) else "")


def outcome(difference: Difference, lower_is_better: bool = False) -> str:
    """``holds`` / ``contradicted`` / ``inconclusive`` by the module docstring's rule."""
    if difference.n < 2 or difference.low is None or difference.high is None:
        return INCONCLUSIVE
    better, worse = (difference.high < 0, difference.low > 0) if lower_is_better else (difference.low > 0,
                                                                                      difference.high < 0)
    return HOLDS if better else CONTRADICTED if worse else INCONCLUSIVE


def per_seed(row: Row, metric: str) -> dict[int, float]:
    """The row's finite values of ``metric`` by seed (its runs are sorted by seed, like the values)."""
    if metric == TIME_TO_TARGET:
        values = row.time_targets[0].values if row.time_targets else ()
    else:
        values = row.metrics[metric].values
    return {seed: value for seed, value in zip(row.group.seeds, values)
            if value is not None and math.isfinite(value)}


def find_baseline(rows: Sequence[Row], name: str) -> Optional[Row]:
    """The row named ``name``, else the one row labelled ``name``; None when there is none.
    Raises :class:`RunDirectoryError` when several rows carry the label and none has the exact name."""
    exact = [row for row in rows if row.name == name]
    if exact:
        return exact[0]
    labelled = [row for row in rows if row.group.label == name]
    if len(labelled) > 1:
        raise RunDirectoryError(f"--baseline {name}: {len(labelled)} rows of one table are labelled {name} ("
                                + "; ".join(row.name for row in labelled) + "); name one of them exactly")
    return labelled[0] if labelled else None


def compare_to_baseline(rows: Sequence[Row], name: str) -> BaselineTable:
    """Every other row of a table against its baseline row, on :data:`BASELINE_METRICS`."""
    baseline = find_baseline(rows, name)
    if baseline is None:
        return BaselineTable(name, None, ())
    timed = bool(baseline.time_targets)
    comparisons = []
    for row in rows:
        if row is baseline:
            continue
        for metric in BASELINE_METRICS + ((TIME_TO_TARGET,) if timed and row.time_targets else ()):
            difference = paired_difference(per_seed(row, metric), per_seed(baseline, metric))
            comparisons.append(Comparison(row.name, metric, difference,
                                          outcome(difference, lower_is_better=metric == TIME_TO_TARGET)))
    return BaselineTable(name, baseline.name, tuple(comparisons))


def check_baseline_found(tables: Sequence[BaselineTable], rows: Sequence[Row]) -> None:
    """Raise when no table has the baseline, naming the rows there are."""
    if tables and all(table.baseline is None for table in tables):
        names = sorted({row.name for row in rows} | {row.group.label for row in rows})
        raise RunDirectoryError(f"--baseline {tables[0].name}: no row of these runs is named so; rows: "
                                + ", ".join(names))
