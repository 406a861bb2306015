"""The claims report: ``claims.md``, ``claims.json`` and ``report.html``, read top down.

``report.html`` opens with the claims summary (one line per claim: verdict, quantifier, its primary and
reported comparisons' outcomes), then the **forest plots**: every comparison's difference with its 95%
interval and the band from 0 to its minimal effect delta, oriented so that right of zero is the paper's
side and coloured by outcome (one plot per unit: accuracy points, e-LUDD, rounds;
:mod:`fedhet.lab.report.forest`), then the comparisons table, each claim's curves as small multiples
(:mod:`fedhet.lab.claims.figures`), where every method's learning rates and other
hyperparameters come from, and last the report of :mod:`fedhet.lab.report.build` over every run the
claims read (one table per protocol). A claim below its protocols' regime is greyed and says "not tested
at this scale" with its trend. The same directory gets ``report.md`` / ``report.json`` (the protocol
tables) and ``plots/``. Every file is written atomically.
"""
from __future__ import annotations

from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from fedhet.core import atomic_write_json, atomic_write_text
from fedhet.lab.claims.definitions import ClaimsSuite
from fedhet.lab.claims.evaluate import ClaimResult
from fedhet.lab.claims.figures import claim_figures
from fedhet.lab.claims.planning import protocol_dir
from fedhet.lab.claims.render import (
    COLUMNS,
    COMPARISON_VERDICT,
    METRIC_UNITS,
    SUMMARY_COLUMNS,
    SUMMARY_VERDICT,
    claim_verdict_text,
    comparison_cells,
    forest_rows,
    markdown_table,
    results_json,
    rule_text,
    summary_cells,
)
from fedhet.lab.report.forest import OUTCOME_COLOURS, forest_plot
from fedhet.lab.report.runs import RunDirectoryError, collect_runs

if TYPE_CHECKING:
    from fedhet.lab.report.build import ReportFiles

# One forest plot per unit: the metrics whose differences share an axis.
FOREST_GROUPS = (("accuracy", ("last_accuracy", "best_accuracy")), ("e_ludd", ("e_ludd",)),
                 ("rounds", ("rounds_to_target",)))
TIER_TITLE = {"quick": "quick tier (below the regime: trends, no verdicts)", "default": "default tier",
              "full": "full tier (the papers' lengths)"}


def forest_figures(results: Sequence[ClaimResult], plots_dir: Path) -> list[tuple[str, Path]]:
    """``(caption, png)`` of one forest plot per unit that some comparison uses."""
    for stale in plots_dir.glob("forest_*.png"):
        stale.unlink()
    figures = []
    for name, metrics in FOREST_GROUPS:
        rows = forest_rows(results, metrics)
        if rows:
            units = METRIC_UNITS[metrics[0]]
            path = forest_plot(rows, plots_dir / f"forest_{name}.png", title=f"every {name} comparison",
                               metric=f"{units}; > 0 is the paper's side")
            figures.append((f"Every comparison in {units}: difference (dot), 95% interval (bar) and 0 to delta "
                            "(band), oriented so that right of 0 is the paper's claim; colour = outcome", path))
    return figures


def _method_lines(suite: ClaimsSuite, results: Sequence[ClaimResult], *, tier: str) -> list[tuple[str, str, str]]:
    """``(protocol/method, lr source, its configuration keys)`` of every side the claims read."""
    seen: dict[str, tuple[str, str]] = {}
    for result in results:
        for c in result.comparisons:
            for side in (c.comparison.method, c.comparison.baseline):
                protocol = suite.protocols[side.protocol]
                keys = ", ".join(f"{k} = {v}" for k, v in protocol.overrides(side.method, tier=tier).items())
                seen.setdefault(side.text, (protocol.lr_source(side.method, tier=tier), keys))
    return [(side, source, keys) for side, (source, keys) in seen.items()]


def claims_markdown(suite: ClaimsSuite, results: Sequence[ClaimResult], plots: dict[str, list[tuple[str, Path]]],
                    forests: Sequence[tuple[str, Path]], report_dir: Path, *, tier: str,
                    warnings: Sequence[str]) -> str:
    lines = ["# fedhet claims", "", f"Tier: {TIER_TITLE[tier]}. {rule_text()}", ""]
    lines += [f"> warning: {w}" for w in warnings] + ([""] if warnings else [])
    lines += [markdown_table(SUMMARY_COLUMNS, [summary_cells(r) for r in results]), ""]
    lines += [f"![{caption}]({path.relative_to(report_dir).as_posix()})" for caption, path in forests] + [""]
    lines += [markdown_table(COLUMNS, [comparison_cells(r, c) for r in results for c in r.comparisons]), ""]
    for result in results:
        claim = result.claim
        lines += [f"## {claim.id}: {claim_verdict_text(result)}", "", f"{claim.statement} ({claim.paper}, "
                  f"{claim.source})", "", f"- quantifier: {claim.quantifier}", f"- paper: {claim.paper_protocol}",
                  f"- here: {claim.here}"]
        lines += [f"- below regime: {item}" for item in result.below_regime] + [""]
        for caption, path in plots.get(claim.id, []):
            lines.append(f"![{caption}]({path.relative_to(report_dir).as_posix()})")
        lines.append("")
    lines += ["## Learning rates and hyperparameters", ""]
    lines += [f"- `{side}`: {source}. Keys: {keys}" for side, source, keys in _method_lines(suite, results, tier=tier)]
    return "\n".join(lines) + "\n"


def _outcome_style(text: str) -> str:
    word = text.split(" (")[0]
    colour = OUTCOME_COLOURS.get(word)
    if word == "not tested":
        return ";color:#9e9e9e"
    return f";color:{colour};font-weight:bold" if colour else ""


def _html_table(header: Sequence[str], rows: Sequence[Sequence[str]], verdict_column: int,
                greyed: Sequence[bool] = ()) -> str:
    head = "".join(f"<th>{escape(title)}</th>" for title in header)
    body = []
    for index_row, row in enumerate(rows):
        cells = []
        for index, text in enumerate(row):
            # wrapped and left-aligned: the report's own tables are nowrap, too wide for statements
            style = "white-space:normal;text-align:left" + (_outcome_style(text) if index == verdict_column else "")
            cells.append(f'<td style="{style}">{escape(text)}</td>')
        grey = ' style="opacity:0.55"' if index_row < len(greyed) and greyed[index_row] else ""
        body.append(f"<tr{grey}>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _figures(entries: Sequence[tuple[str, Path]]) -> str:
    from fedhet.lab.report.html import data_uri

    return "".join(f'<figure><img alt="{escape(caption)}" src="{data_uri(path)}">'
                   f"<figcaption>{escape(caption)}</figcaption></figure>" for caption, path in entries)


def claims_html(suite: ClaimsSuite, results: Sequence[ClaimResult], plots: dict[str, list[tuple[str, Path]]],
                forests: Sequence[tuple[str, Path]], *, tier: str) -> str:
    """The claims section of ``report.html`` (everything escaped; images as data URIs)."""
    comparisons = [(r, c) for r in results for c in r.comparisons]
    parts = [f"<h2>Claims: {escape(TIER_TITLE[tier])}</h2>",
             _html_table(SUMMARY_COLUMNS, [summary_cells(r) for r in results], SUMMARY_VERDICT,
                         [not r.tested for r in results]),
             f'<p class="note">{escape(rule_text())}</p>',
             "<h3>Every comparison</h3>", f"<div>{_figures(forests)}</div>",
             _html_table(COLUMNS, [comparison_cells(r, c) for r, c in comparisons], COMPARISON_VERDICT,
                         [not r.tested for r, _c in comparisons])]
    for result in results:
        claim = result.claim
        parts.append(f"<h3>{escape(claim.id)}: {escape(claim_verdict_text(result))}</h3>")
        parts.append(f"<p>{escape(claim.statement)} ({escape(claim.paper)}, {escape(claim.source)}; "
                     f"quantifier: {escape(claim.quantifier)})</p>")
        parts.append(f'<p class="note">paper: {escape(claim.paper_protocol)}<br>here: {escape(claim.here)}</p>')
        if result.below_regime:
            parts.append('<p class="note">below regime (no verdict): '
                         + escape("; ".join(result.below_regime)) + "</p>")
        parts.append(f'<div class="grid">{_figures(plots.get(claim.id, []))}</div>')
    sources = "".join(f"<li><code>{escape(side)}</code>: {escape(source)}<br><small>{escape(keys)}</small></li>"
                      for side, source, keys in _method_lines(suite, results, tier=tier))
    parts.append("<details open><summary>learning rates and hyperparameters: where they come from</summary>"
                 f"<ul>{sources}</ul></details>")
    parts.append("<h2>Protocols: every run the claims read</h2>")
    return "\n".join(parts)


def write_claims_report(suite: ClaimsSuite, results: Sequence[ClaimResult], out_dir: Path, report_dir: Path, *,
                        tier: str, warnings: Sequence[str] = ()) -> ReportFiles:
    """Write ``claims.md``, ``claims.json``, the plots and ``report.html`` (module docstring) into ``report_dir``."""
    from fedhet.lab.report.build import ReportFiles, build_report, write_report

    report_dir.mkdir(parents=True, exist_ok=True)
    plots_dir = report_dir / "plots"
    plots = claim_figures(results, plots_dir)
    forests = forest_figures(results, plots_dir)
    markdown_path, json_path = report_dir / "claims.md", report_dir / "claims.json"
    atomic_write_text(markdown_path, claims_markdown(suite, results, plots, forests, report_dir, tier=tier,
                                                     warnings=warnings))
    atomic_write_json(json_path, results_json(results, tier=tier, out_dir=str(out_dir)))
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
    title = f"fedhet claims ({TIER_TITLE[tier]})"
    report = build_report([run for part in reports for run in part.runs], title=title, warnings=list(warnings))
    report.sections = [section for part in reports for section in part.sections]
    files = write_report(report, report_dir, intro_html=claims_html(suite, results, plots, forests, tier=tier))
    return ReportFiles(markdown=markdown_path, json=json_path, html=files.html,
                       plots=tuple(p for v in plots.values() for _c, p in v) + tuple(p for _c, p in forests))
