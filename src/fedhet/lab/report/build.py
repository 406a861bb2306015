"""``fedhet report``: many runs -> the papers' kind of table, as Markdown, JSON and a self-contained HTML page.

::

    report = build_report(collect_runs(["runs/compare"]), targets=(0.8,))
    files = write_report(report, "runs/compare/report")

The output directory gets ``report.md`` (tables, with plots linked from ``plots/``), ``report.json``
(every number: per row the per-seed values, mean, sample std and count), ``report.html`` (tables and
plots embedded as base64 PNG data URIs, inline CSS, no script and no external asset: one file to
open or mail), ``report.csv`` (tidy: one line per run and metric, :mod:`fedhet.lab.report.export`),
with ``latex=True`` ``report.tex`` (booktabs), and ``plots/*.png``. Each file is written atomically.

Per section (see :mod:`fedhet.lab.report.grouping`) the plots are test accuracy, train loss, e-LUD
and, with per-client evaluation, the worst-10% client accuracy over rounds with seed bands, and the
partition heat map and participation raster of the section's first run (its ``partition.png`` and
``participation.png``). With several sections, each curve is also drawn as small multiples (one panel
per section); a method keeps one colour in every figure. With ``baseline``, each section compares its
rows with the baseline row, paired by seed (:mod:`fedhet.lab.report.baseline`), in a table and
the claims report's forest plot.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional, Sequence

from fedhet.core import atomic_write_json, atomic_write_text
from fedhet.lab.report.baseline import BASELINE_METRICS, check_baseline_found, compare_to_baseline
from fedhet.lab.report.client_report import client_rows, plot_client_distribution
from fedhet.lab.report.data import Report, ReportFiles, ReportSection, Row
from fedhet.lab.report.export import report_csv, report_latex
from fedhet.lab.report.forest import ForestRow, forest_plot
from fedhet.lab.report.grouping import Group, common_setting, group_runs, make_sections
from fedhet.lab.report.html import render_html
from fedhet.lab.report.markdown import render_markdown
from fedhet.lab.report.plots import CURVES, method_colours, plot_curves, plot_small_multiples
from fedhet.lab.report.runs import RunData, RunDirectoryError
from fedhet.lab.report.stats import (
    METRICS,
    Stat,
    describe,
    describe_rounds,
    run_metrics,
    run_rounds_to_target,
    run_seconds_to_target,
    run_virtual_seconds,
)
from fedhet.lab.report.tables import BASELINE_METRIC_NAMES, STD_NOTE
from fedhet.lab.report.time_curves import plot_accuracy_against_time


def _default_targets(runs: Sequence[RunData]) -> tuple[float, ...]:
    targets = {run.config.run.target_accuracy for run in runs}
    if len(targets) == 1:
        [target] = targets
        if target is not None:
            return (target,)
    return ()


def _first_image(groups: Sequence[Group], name: str) -> tuple[Optional[Path], Optional[Path]]:
    for group in groups:
        for run in group.runs:
            if (run.path / name).is_file():
                return run.path / name, run.path
    return None, None


def build_report(runs: Sequence[RunData], *, targets: Optional[Sequence[float]] = None,
                 group_by: Optional[Sequence[str]] = None, last_fraction: float = 0.1,
                 last_rounds: Optional[int] = None, title: str = "fedhet report",
                 warnings: Sequence[str] = (), baseline: Optional[str] = None) -> Report:
    """Group ``runs`` and compute every row's statistics (see :mod:`fedhet.lab.report.stats`).

    ``targets``: accuracies for the rounds-to-target columns (default: the runs' common
    ``run.target_accuracy``, if any). ``last_rounds`` replaces the last-10% window by the last N rounds.
    ``baseline``: the row name (or label) every other row of a section is compared with, paired by seed.
    """
    if not runs:
        raise RunDirectoryError("no runs to report on")
    for target in targets or ():
        if not 0 < target <= 1:
            raise RunDirectoryError(f"--target {target}: an accuracy in (0, 1], e.g. 0.8")
    if not 0 < last_fraction <= 1:
        raise RunDirectoryError(f"last fraction {last_fraction}: must be in (0, 1]")
    if last_rounds is not None and last_rounds < 1:
        raise RunDirectoryError(f"--last-rounds {last_rounds}: must be at least 1")
    notes = list(warnings)
    target_list = tuple(targets) if targets is not None else _default_targets(runs)
    groups = group_runs(runs, warn=notes.append)
    sections = []
    for section in make_sections(groups, group_by):
        rows = []
        for group in section.groups:
            per_run = [run_metrics(run, last_fraction=last_fraction, last_rounds=last_rounds) for run in group.runs]
            metrics = {name: describe([values[name] for values in per_run]) for name in METRICS}
            row_targets = [describe_rounds(t, [run_rounds_to_target(run, t) for run in group.runs])
                           for t in target_list]
            row = Row(group, metrics, row_targets, sum(not run.complete for run in group.runs))
            clock = [run_virtual_seconds(run) for run in group.runs]
            if any(seconds is not None for seconds in clock):
                row.virtual_seconds = describe(clock)
                row.time_targets = [describe_rounds(t, [run_seconds_to_target(run, t) for run in group.runs])
                                    for t in target_list]
            rows.append(row)
        report_section = ReportSection(section, rows, client_rows=client_rows(section.groups))
        report_section.partition_image, report_section.image_run = _first_image(section.groups, "partition.png")
        report_section.participation_image, _ = _first_image(section.groups, "participation.png")
        if baseline is not None:
            report_section.baseline = compare_to_baseline(rows, baseline)
        sections.append(report_section)
    if baseline is not None:
        check_baseline_found([section.baseline for section in sections],
                             [row for section in sections for row in section.rows])
    window = f"last {last_rounds} rounds" if last_rounds is not None else f"last {100 * last_fraction:g}%"
    counted = [run for group in groups for run in group.runs]
    return Report(title, sections, common_setting(groups), target_list, window, counted, notes)


def _plot_name(index: int, key: str) -> str:
    return f"section{index + 1}_{key}.png"


def _json_number(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def report_to_json(report: Report) -> dict[str, Any]:
    def stat(s: Stat) -> dict[str, Any]:
        return {"mean": _json_number(s.mean), "std": _json_number(s.std), "n": s.n,
                "values": [_json_number(v) for v in s.values]}

    return {
        "title": report.title,
        "std": STD_NOTE,
        "window": report.window,
        "targets": list(report.targets),
        "common_setting": {k: _json_number(v) for k, v in report.common.items()},
        "warnings": report.warnings,
        "sections": [{
            "title": rs.title,
            "setting": rs.section.values,
            "rows": [{
                "name": row.name,
                "label": row.group.label,
                "seeds": row.group.seeds,
                "runs": [str(run.path) for run in row.group.runs],
                "unfinished": row.unfinished,
                "metrics": {name: stat(s) for name, s in row.metrics.items()},
                "rounds_to_target": [{"target": t.target, "mean": _json_number(t.mean), "std": _json_number(t.std),
                                      "reached": t.reached, "n": t.n, "values": list(t.values)}
                                     for t in row.targets],
                "virtual_seconds": None if row.virtual_seconds is None else stat(row.virtual_seconds),
                "virtual_seconds_to_target": [{"target": t.target, "mean": _json_number(t.mean),
                                               "std": _json_number(t.std), "reached": t.reached, "n": t.n,
                                               "values": list(t.values)} for t in row.time_targets],
            } for row in rs.rows],
            "client_accuracy": [{"name": row.name, "seeds": row.seeds, "rounds": list(row.rounds),
                                 "metrics": {name: stat(s) for name, s in row.stats.items()}}
                                for row in rs.client_rows],
            "baseline": None if rs.baseline is None else {
                "name": rs.baseline.name, "row": rs.baseline.baseline,
                "comparisons": [{"row": c.row, "metric": c.metric, "seeds": list(c.difference.seeds),
                                 "differences": list(c.difference.differences),
                                 "mean": c.difference.mean, "std": c.difference.std,
                                 "low": c.difference.low, "high": c.difference.high, "outcome": c.outcome}
                                for c in rs.baseline.comparisons]},
        } for rs in report.sections],
    }


def _baseline_plot(section: ReportSection, path: Path) -> Optional[Path]:
    """The claims report's forest plot of a section's comparisons with its baseline (percentage points)."""
    table = section.baseline
    if table is None or not table.comparisons:
        return None

    def points(value: Optional[float]) -> float:
        return math.nan if value is None else 100.0 * value

    rows = [ForestRow(f"{c.row}: {BASELINE_METRIC_NAMES[c.metric]}", points(c.difference.mean),
                      points(c.difference.low), points(c.difference.high), None, c.outcome)
            for c in table.comparisons if c.metric in BASELINE_METRICS]     # the accuracies (seconds are not points)
    return forest_plot(rows, path, title=f"minus {table.baseline}, paired by seed: {section.title}",
                       metric="accuracy, percentage points")


def write_report(report: Report, out_dir: str | Path, *, intro_html: str = "", latex: bool = False) -> ReportFiles:
    """Write plots, ``report.md``, ``report.json``, ``report.html``, ``report.csv`` and (``latex``)
    ``report.tex`` into ``out_dir`` (``intro_html``: a section placed before the tables of the HTML page)."""

    out = Path(out_dir)
    plots_dir = out / "plots"
    for stale in [*plots_dir.glob("section*_*.png"), *plots_dir.glob("panels_*.png")]:   # an earlier report's
        stale.unlink()
    written = []
    colours = method_colours([row.group for section in report.sections for row in section.rows])
    for index, section in enumerate(report.sections):
        section.plots = {}
        groups = [row.group for row in section.rows]
        for key, (short, _long) in CURVES.items():
            path = plots_dir / _plot_name(index, key)
            if plot_curves(groups, key, path, title=f"{short}: {section.title}", colours=colours):
                section.plots[key] = path
                written.append(path)
        # Runs with a virtual clock ([system]): accuracy against virtual seconds too.
        path = plots_dir / _plot_name(index, "test_accuracy_time")
        if plot_accuracy_against_time(groups, path, title=f"test accuracy over virtual time: {section.title}"):
            section.plots["test_accuracy_time"] = path
            written.append(path)
        section.baseline_plot = _baseline_plot(section, plots_dir / _plot_name(index, "baseline"))
        if section.baseline_plot is not None:
            written.append(section.baseline_plot)
        section.client_plot = None
        if section.client_rows:
            path = plots_dir / _plot_name(index, "client_accuracy")
            if plot_client_distribution(groups, path, title=f"per-client accuracy, last evaluation: {section.title}"):
                section.client_plot = path
                written.append(path)
    report.panels = {}
    if len(report.sections) > 1:
        panels = [(section.title, [row.group for row in section.rows]) for section in report.sections]
        for key, (short, _long) in CURVES.items():
            path = plots_dir / f"panels_{key}.png"
            if plot_small_multiples(panels, key, path, title=f"{short}, one panel per table", colours=colours):
                report.panels[key] = path
                written.append(path)
    markdown_path, html_path, json_path = out / "report.md", out / "report.html", out / "report.json"
    csv_path, latex_path = out / "report.csv", (out / "report.tex" if latex else None)
    atomic_write_text(markdown_path, render_markdown(report, relative_to=out))
    atomic_write_json(json_path, report_to_json(report))
    atomic_write_text(html_path, render_html(report, intro_html=intro_html))
    atomic_write_text(csv_path, report_csv(report))
    if latex_path is not None:
        atomic_write_text(latex_path, report_latex(report))
    return ReportFiles(markdown_path, html_path, json_path, tuple(written), csv_path, latex_path)
