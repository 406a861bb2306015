"""The report as one self-contained HTML page.

Everything is inside the file: the CSS is inline, every image is a ``data:image/png;base64,...`` URI,
there is no script and no link to another file or site, so the page opens anywhere (a browser with
no network, an e-mail attachment) and looks the same. Text from configurations and run names is
HTML-escaped.
"""
from __future__ import annotations

import base64
from html import escape
from pathlib import Path
from typing import Optional

from fedhet.lab.report.client_report import COLUMN_TITLES, NOTE, row_cells
from fedhet.lab.report.data import Report, ReportSection, headline_setting
from fedhet.lab.report.grouping import format_value
from fedhet.lab.report.markdown import notes_text
from fedhet.lab.report.tables import BASELINE_TITLES, baseline_cells, column_titles, section_cells

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 2em auto;
       max-width: 1200px; padding: 0 1em; color: #1a1a1a; background: #ffffff; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
p.note { color: #444; font-size: 0.9em; }
p.warning { color: #8a4b00; font-size: 0.9em; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; white-space: nowrap; }
th { background: #f2f4f7; }
td:first-child, th:first-child { text-align: left; }
tr:nth-child(even) td { background: #fafbfc; }
td.best { font-weight: bold; }
figure { margin: 1em 0; }
figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 0.85em; color: #555; }
.grid { display: flex; flex-wrap: wrap; gap: 1em; }
.grid figure { flex: 1 1 560px; }
details { margin: 1em 0; font-size: 0.9em; }
code { font-size: 0.95em; }
"""


def data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _figure(path: Optional[Path], caption: str) -> str:
    if path is None or not path.is_file():
        return ""
    return (f'<figure><img alt="{escape(caption)}" src="{data_uri(path)}">'
            f"<figcaption>{escape(caption)}</figcaption></figure>")


def _table(report: "Report", section: "ReportSection") -> str:
    head = "".join(f"<th>{escape(title)}</th>" for title in column_titles(report.window, report.targets, section.clocked))
    body = []
    for cells in section_cells(section):
        body.append("<tr>" + "".join(f'<td class="best">{escape(text)}</td>' if best else f"<td>{escape(text)}</td>"
                                     for text, best in cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _setting_table(setting: dict) -> str:
    rows = "".join(f"<tr><td><code>{escape(key)}</code></td><td>{escape(format_value(value))}</td></tr>"
                   for key, value in sorted(setting.items()))
    return f"<table><tbody>{rows}</tbody></table>"


def _section(report: "Report", section: "ReportSection") -> str:
    from fedhet.lab.report.plots import CURVES
    from fedhet.lab.report.time_curves import TIME_CURVES

    parts = [f"<h2>{escape(section.title)}</h2>", _table(report, section), _baseline(section)]
    curves = [_figure(path, TIME_CURVES[key] if key in TIME_CURVES
                      else f"{CURVES[key][0]} over rounds: mean over seeds, band = ± sample std")
              for key, path in section.plots.items()]
    source = f" (run {section.image_run.name})" if section.image_run is not None else ""
    curves.append(_figure(section.partition_image, f"partition: examples per client and class{source}"))
    curves.append(_figure(section.participation_image, f"participation: clients x rounds{source}"))
    parts.append('<div class="grid">' + "".join(c for c in curves if c) + "</div>")
    if section.client_rows:
        head = "".join(f"<th>{escape(t)}</th>" for t in COLUMN_TITLES)
        body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row_cells(row)) + "</tr>"
                       for row in section.client_rows)
        parts.append(f'<h3>Per-client accuracy</h3><p class="note">{escape(NOTE)}</p>'
                     f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        parts.append(_figure(section.client_plot, "per-client accuracy at the last per-client evaluation: "
                                                  "empirical CDF over clients (all seeds pooled)"))
    runs = "".join(f"<li><code>{escape(str(run.path))}</code> ({escape(row.name)}, seed {run.seed})</li>"
                   for row in section.rows for run in row.group.runs)
    parts.append(f"<details><summary>runs of this table</summary><ul>{runs}</ul></details>")
    return "\n".join(parts)


def _baseline(section: "ReportSection") -> str:
    from fedhet.lab.report.baseline import table_note

    table = section.baseline
    if table is None:
        return ""
    if table.baseline is None:
        return f'<p class="note">No row of this table is named {escape(table.name)}: no comparison.</p>'
    head = "".join(f"<th>{escape(title)}</th>" for title in BASELINE_TITLES)
    body = "".join("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in cells) + "</tr>"
                   for cells in baseline_cells(table))
    return (f'<h3>Against {escape(table.baseline)}</h3><p class="note">{escape(table_note(table))}</p>'
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
            + _figure(section.baseline_plot, f"paired differences against {table.baseline}: mean and 95% interval"))


def _panels(report: "Report") -> str:
    from fedhet.lab.report.plots import CURVES

    if not report.panels:
        return ""
    figures = "".join(_figure(path, f"{CURVES[key][0]}: one panel per table, one colour per method")
                      for key, path in report.panels.items())
    return f"<h2>Every table side by side</h2>{figures}"


def render_html(report: "Report", *, intro_html: str = "") -> str:
    """The page; ``intro_html`` (already escaped, e.g. the claims section) goes before the tables."""
    headline = ", ".join(f"{key} = {format_value(value)}" for key, value in headline_setting(report.common).items())
    warnings = "".join(f'<p class="warning">warning: {escape(w)}</p>' for w in report.warnings)
    sections = "\n".join(_section(report, section) for section in report.sections)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(report.title)}</title>
<style>{CSS}</style>
</head>
<body>
<h1>{escape(report.title)}</h1>
<p>{len(report.runs)} runs. Common setting: {escape(headline) or "(none)"}.</p>
<p class="note">{escape(notes_text(report).replace("Bold:", "Bold cells:"))}</p>
{warnings}
<details><summary>every configuration value the runs share</summary>{_setting_table(report.common)}</details>
{intro_html}
{sections}
{_panels(report)}
<p class="note">Written by <code>fedhet report</code>.</p>
</body>
</html>
"""
