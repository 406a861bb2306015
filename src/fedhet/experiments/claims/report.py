"""The claims report: ``claims.md``, ``claims.json`` and ``report.html`` with each claim's curves.

``report.html`` is the report of :mod:`fedhet.experiments.report` over every run the claims read (one
table per protocol, with its curves, partition and participation images), preceded by a claims section:
the verdict per claim, every comparison with its numbers, and per claim the test-accuracy curves (and the
e-LUD curves for e-LUDD comparisons) of the runs it compares, mean over seeds with a ± std band. The same
directory gets ``report.md`` / ``report.json`` (the protocol tables) and ``plots/``. Every file is
written atomically.
"""
from __future__ import annotations

from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from fedhet.core.io import atomic_write_json, atomic_write_text
from fedhet.experiments.claims.definitions import ClaimsSuite, Side
from fedhet.experiments.claims.evaluate import ClaimResult
from fedhet.experiments.claims.planning import protocol_dir
from fedhet.experiments.claims.render import (COLUMNS, COMPARISON_VERDICT, SUMMARY_COLUMNS, SUMMARY_VERDICT,
                                              comparison_cells, markdown_table, results_json, rule_text,
                                              summary_cells)
from fedhet.experiments.claims.verdict import HOLDS, NOT_REPRODUCED
from fedhet.experiments.grouping import Group
from fedhet.experiments.plots import plot_curves
from fedhet.experiments.runs import RunDirectoryError, collect_runs

if TYPE_CHECKING:
    from fedhet.experiments.report import ReportFiles

_VERDICT_COLOUR = {HOLDS: "#0a6b2b", NOT_REPRODUCED: "#a31515"}


def _sides(result: ClaimResult) -> list[tuple[Side, tuple]]:
    seen: dict[Side, tuple] = {}
    for c in result.comparisons:
        for values in (c.method, c.baseline):
            seen.setdefault(values.side, values.runs)
    return list(seen.items())


def claim_plots(results: Sequence[ClaimResult], plots_dir: Path) -> dict[str, list[tuple[str, Path]]]:
    """Per claim, ``(caption, png)`` of its curves: test accuracy, and e-LUD when it compares e-LUDD."""
    for stale in plots_dir.glob("claim_*.png"):
        stale.unlink()
    plots: dict[str, list[tuple[str, Path]]] = {}
    for result in results:
        sides = _sides(result)
        one_protocol = len({side.protocol for side, _runs in sides}) == 1
        groups = [Group(side.text, {}, list(runs), display=side.method if one_protocol else side.text)
                  for side, runs in sides if runs]
        keys = ["test_accuracy"] + (["e_lud"] if any(c.comparison.metric == "e_ludd" for c in result.comparisons)
                                    else [])
        plots[result.claim.id] = []
        for key in keys:
            path = plots_dir / f"claim_{result.claim.id}_{key}.png"
            name = "test accuracy" if key == "test_accuracy" else "e-LUD"
            if groups and plot_curves(groups, key, path, title=f"{result.claim.id}: {name}"):
                plots[result.claim.id].append((f"{result.claim.id}: {name} over rounds (mean over seeds, "
                                               "band = ± sample std)", path))
    return plots


def _lr_lines(suite: ClaimsSuite, results: Sequence[ClaimResult], *, full: bool) -> list[tuple[str, str]]:
    seen: dict[str, str] = {}
    for result in results:
        for side, _runs in _sides(result):
            seen.setdefault(side.text, suite.protocols[side.protocol].lr_source(side.method, full=full))
    return list(seen.items())


def claims_markdown(suite: ClaimsSuite, results: Sequence[ClaimResult], plots: dict[str, list[tuple[str, Path]]],
                    report_dir: Path, *, full: bool, warnings: Sequence[str]) -> str:
    mode = "`--full` (paper length)" if full else "CPU scale"
    lines = ["# fedhet claims", "", f"Mode: {mode}. {rule_text()}", ""]
    lines += [f"> warning: {w}" for w in warnings] + ([""] if warnings else [])
    lines += [markdown_table(SUMMARY_COLUMNS, [summary_cells(r) for r in results]), "",
              markdown_table(COLUMNS, [comparison_cells(r, c) for r in results for c in r.comparisons]), ""]
    for result in results:
        claim = result.claim
        lines += [f"## {claim.id}: {result.verdict}", "", f"{claim.statement} ({claim.paper}, {claim.source})", "",
                  f"- paper: {claim.paper_protocol}", f"- here: {claim.here}", ""]
        for caption, path in plots.get(claim.id, []):
            lines.append(f"![{caption}]({path.relative_to(report_dir).as_posix()})")
        lines.append("")
    lines += ["## Learning rates", ""]
    lines += [f"- `{side}`: {source}" for side, source in _lr_lines(suite, results, full=full)]
    return "\n".join(lines) + "\n"


def _html_table(header: Sequence[str], rows: Sequence[Sequence[str]], verdict_column: int) -> str:
    head = "".join(f"<th>{escape(title)}</th>" for title in header)
    body = []
    for row in rows:
        cells = []
        for index, text in enumerate(row):
            colour = _VERDICT_COLOUR.get(text.split(" (")[0]) if index == verdict_column else None
            # wrapped and left-aligned: the report's own tables are nowrap, too wide for statements
            style = "white-space:normal;text-align:left" + (f";color:{colour};font-weight:bold" if colour else "")
            cells.append(f'<td style="{style}">{escape(text)}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def claims_html(suite: ClaimsSuite, results: Sequence[ClaimResult], plots: dict[str, list[tuple[str, Path]]], *,
                full: bool) -> str:
    """The claims section of ``report.html`` (everything escaped; images as data URIs)."""
    from fedhet.experiments.html import data_uri

    parts = ["<h2>Claims</h2>", f'<p class="note">{escape(rule_text())}</p>',
             _html_table(SUMMARY_COLUMNS, [summary_cells(r) for r in results], SUMMARY_VERDICT),
             _html_table(COLUMNS, [comparison_cells(r, c) for r in results for c in r.comparisons],
                         COMPARISON_VERDICT)]
    for result in results:
        claim = result.claim
        parts.append(f"<h3>{escape(claim.id)}: {escape(result.verdict)}</h3>")
        parts.append(f"<p>{escape(claim.statement)} ({escape(claim.paper)}, {escape(claim.source)})</p>")
        parts.append(f'<p class="note">paper: {escape(claim.paper_protocol)}<br>here: {escape(claim.here)}</p>')
        figures = "".join(f'<figure><img alt="{escape(caption)}" src="{data_uri(path)}">'
                          f"<figcaption>{escape(caption)}</figcaption></figure>"
                          for caption, path in plots.get(claim.id, []))
        parts.append(f'<div class="grid">{figures}</div>')
    sources = "".join(f"<li><code>{escape(side)}</code>: {escape(source)}</li>"
                      for side, source in _lr_lines(suite, results, full=full))
    parts.append(f"<details open><summary>learning rates: where they come from</summary><ul>{sources}</ul></details>")
    parts.append("<h2>Protocols: every run the claims read</h2>")
    return "\n".join(parts)


def write_claims_report(suite: ClaimsSuite, results: Sequence[ClaimResult], out_dir: Path, report_dir: Path, *,
                        full: bool, warnings: Sequence[str] = ()) -> ReportFiles:
    """Write ``claims.md``, ``claims.json``, the plots and ``report.html`` (module docstring) into ``report_dir``."""
    from fedhet.experiments.report import ReportFiles, build_report, write_report

    report_dir.mkdir(parents=True, exist_ok=True)
    plots = claim_plots(results, report_dir / "plots")
    markdown_path, json_path = report_dir / "claims.md", report_dir / "claims.json"
    atomic_write_text(markdown_path, claims_markdown(suite, results, plots, report_dir, full=full, warnings=warnings))
    atomic_write_json(json_path, results_json(results, full=full, out_dir=str(out_dir)))
    protocols = []
    for result in results:
        protocols += [p for p in result.claim.protocols if p not in protocols]
    # One table per protocol (titled by it): the report's own sectioning would merge protocols that differ
    # only in a client key (Hybrid and Hybrid+ differ in client.system).
    reports = []
    for protocol in protocols:
        directory = protocol_dir(out_dir, protocol)
        try:
            runs = collect_runs([directory]) if directory.is_dir() else []
        except RunDirectoryError:       # nothing evaluated there yet: the claims table says what is missing
            runs = []
        if runs:
            part = build_report(runs, group_by=[])
            for section in part.sections:
                section.section.title = f"{protocol}: {suite.protocols[protocol].title}"
            reports.append(part)
    if not reports:
        raise RunDirectoryError(f"{out_dir}: no run of these claims has evaluated a round yet; "
                                "run `fedhet claims run` first")
    title = "fedhet claims" + (" (--full)" if full else " (CPU scale)")
    report = build_report([run for part in reports for run in part.runs], title=title, warnings=list(warnings))
    report.sections = [section for part in reports for section in part.sections]
    files = write_report(report, report_dir, intro_html=claims_html(suite, results, plots, full=full))
    return ReportFiles(markdown=markdown_path, json=json_path, html=files.html,
                       plots=tuple(p for v in plots.values() for _c, p in v))
