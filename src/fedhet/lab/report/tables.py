"""The report's table as text cells, shared by the Markdown and HTML renderers.

Accuracies are shown in percent with two decimals, ``mean ± std`` (sample std over seeds); e-LUDD
with two decimals (FedAWARE Table 2); rounds to a target as ``mean ± std (k/n)`` over the ``k`` of
``n`` seeds that reached it; seconds per round with three significant digits.
"""
from __future__ import annotations

from typing import Optional

from fedhet.lab.report.data import ReportSection
from fedhet.lab.report.stats import Stat, TargetStat

ACCURACY_METRICS = ("final_accuracy", "best_accuracy", "last_accuracy")
STD_NOTE = "sample standard deviation over seeds (ddof = 1)"


def column_titles(window: str, targets: tuple[float, ...], clocked: bool = False) -> list[str]:
    """The table's column titles; ``clocked`` (a section of runs with a virtual clock) adds the virtual
    seconds to each target and at the end."""
    clock = [f"virtual s to {100 * t:g}%" for t in targets] + ["virtual s (end)"] if clocked else []
    return (["algorithm", "seeds", "final acc. (%)", "best acc. (%)", f"{window} acc. (%)", "e-LUDD"]
            + [f"rounds to {100 * t:g}%" for t in targets] + clock + ["s/round"])


def mean_std_text(mean: Optional[float], std: Optional[float], fmt: str, scale: float = 1.0) -> str:
    """A table cell ``mean ± std`` (``mean`` alone without a std, ``–`` without a mean), both times
    ``scale`` and formatted with ``fmt``."""
    if mean is None:
        return "–"
    text = format(scale * mean, fmt)
    return text if std is None else f"{text} ± {format(scale * std, fmt)}"


def stat_cell(name: str, stat: Stat) -> str:
    if name in ACCURACY_METRICS:
        return mean_std_text(stat.mean, stat.std, ".2f", 100.0)
    if name == "e_ludd":
        return mean_std_text(stat.mean, stat.std, ".2f")
    return mean_std_text(stat.mean, stat.std, ".3g")


def target_cell(stat: TargetStat, fmt: str = ".1f") -> str:
    return f"{mean_std_text(stat.mean, stat.std, fmt)} ({stat.reached}/{stat.n})"


def seeds_cell(seeds: list[int], unfinished: int) -> str:
    text = str(len(seeds))
    return f"{text} ({unfinished} unfinished)" if unfinished else text


def best_rows(rows_means: list[Optional[float]]) -> set[int]:
    """Indices of the highest mean (ties included); nothing when fewer than two rows have a value."""
    present = [m for m in rows_means if m is not None]
    if len(present) < 2:
        return set()
    top = max(present)
    return {i for i, m in enumerate(rows_means) if m is not None and m == top}


def section_cells(section: "ReportSection") -> list[list[tuple[str, bool]]]:
    """``(text, is_best)`` per cell of a section's table; the best mean of each accuracy column is marked."""
    best = {name: best_rows([row.metrics[name].mean for row in section.rows]) for name in ACCURACY_METRICS}
    table = []
    for index, row in enumerate(section.rows):
        cells = [(row.name, False), (seeds_cell(row.group.seeds, row.unfinished), False)]
        for name in ("final_accuracy", "best_accuracy", "last_accuracy", "e_ludd"):
            cells.append((stat_cell(name, row.metrics[name]), index in best.get(name, set())))
        cells.extend((target_cell(t), False) for t in row.targets)
        if section.clocked:
            if row.time_targets:
                cells.extend((target_cell(t, ".0f"), False) for t in row.time_targets)
            else:                     # a row without a clock in a section with one
                cells.extend(("–", False) for _ in row.targets)
            clock = row.virtual_seconds
            cells.append(("–" if clock is None else mean_std_text(clock.mean, clock.std, ".0f"), False))
        cells.append((stat_cell("seconds_per_round", row.metrics["seconds_per_round"]), False))
        table.append(cells)
    return table


# --baseline (fedhet.lab.report.baseline): the compared metrics' names and the table's columns.
BASELINE_METRIC_NAMES = {"final_accuracy": "final acc.", "last_accuracy": "last-window acc.",
                         "virtual_seconds_to_target": "virtual s to target"}
BASELINE_TITLES = ("row", "metric", "paired seeds", "difference", "95% interval", "outcome")


def baseline_cells(table) -> list[list[str]]:
    """Text cells of a section's comparisons with its baseline (``BaselineTable``): accuracies in
    percentage points, virtual times in seconds (marked ``s``)."""
    rows = []
    for comparison in table.comparisons:
        seconds = comparison.metric == "virtual_seconds_to_target"

        def points(value: Optional[float]) -> str:
            if value is None:
                return "–"
            return f"{value:+.0f} s" if seconds else f"{100.0 * value:+.2f}"

        difference = comparison.difference
        interval = ("–" if difference.low is None or difference.high is None
                    else f"[{points(difference.low)}, {points(difference.high)}]")
        rows.append([comparison.row, BASELINE_METRIC_NAMES.get(comparison.metric, comparison.metric),
                     str(difference.n), points(difference.mean), interval, comparison.outcome])
    return rows
