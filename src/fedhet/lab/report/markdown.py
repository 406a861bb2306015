"""The report as Markdown: one table per section (GitHub pipe tables), plots linked as images."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional
from urllib.parse import quote

from fedhet.lab.report.client_report import COLUMN_TITLES, NOTE, row_cells
from fedhet.lab.report.data import Report, ReportSection, headline_setting
from fedhet.lab.report.grouping import assignments_text
from fedhet.lab.report.tables import BASELINE_TITLES, STD_NOTE, baseline_cells, column_titles, section_cells

# Characters with a meaning in Markdown inline text (emphasis, code, links, table cells) get a
# backslash; HTML's own (& < >) become entities, so no title, run name or config string can put raw
# HTML or a live link into report.md (as report.html escapes them for HTML).
_MARKDOWN_SPECIAL = set("\\`*_[]|")
_HTML_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def _escape(text: str) -> str:
    """``text`` as literal Markdown inline text on one line (comment above)."""
    out = []
    for char in " ".join(str(text).splitlines()):
        if char in _HTML_ENTITIES:
            out.append(_HTML_ENTITIES[char])
        elif char in _MARKDOWN_SPECIAL:
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def table_text(report: "Report", section: "ReportSection") -> str:
    titles = column_titles(report.window, report.targets, section.clocked)
    lines = ["| " + " | ".join(_escape(title) for title in titles) + " |", "|" + "|".join("---" for _ in titles) + "|"]
    lines += ["| " + " | ".join(f"**{_escape(text)}**" if best else _escape(text) for text, best in row) + " |"
              for row in section_cells(section)]
    return "\n".join(lines)


def notes_text(report: "Report") -> str:
    parts = [f"Mean ± {STD_NOTE} of: the test accuracy at the last evaluated round (final), the highest "
             f"evaluated one (best), the mean over the evaluated rounds in the {report.window} of the rounds; "
             "e-LUDD = mean e-LUD over the rounds (FedAWARE); seconds of wall-clock time per round."]
    if report.targets:
        parts.append("Rounds to a target: the first evaluated round reaching it, averaged over the seeds that "
                     "did (k/n: how many of the n seeds reached it).")
    if any(section.clocked for section in report.sections):
        parts.append("Virtual s: the virtual clock's seconds (docs/system.md) at that round, and at the last "
                     "round (end).")
    parts.append("Bold: the best mean of a column.")
    return " ".join(parts)


def _link(path: Optional[Path], relative_to: Path) -> Optional[str]:
    if path is None:
        return None
    # Percent-encoded: a space, parenthesis or angle bracket in a file name cannot end the link early.
    return quote(Path(os.path.relpath(path, relative_to)).as_posix())


def render_markdown(report: "Report", *, relative_to: Path) -> str:
    lines = [f"# {_escape(report.title)}", "", f"{len(report.runs)} runs. Common setting: "
             + (_escape(assignments_text(headline_setting(report.common))) or "(none)") + ".", "",
             notes_text(report), ""]
    for warning in report.warnings:
        lines.append(f"> warning: {_escape(warning)}")
    if report.warnings:
        lines.append("")
    for section in report.sections:
        lines += [f"## {_escape(section.title)}", "", table_text(report, section), ""]
        lines += baseline_markdown(section, relative_to)
        images = [(f"{key.replace('_', ' ')}", path) for key, path in section.plots.items()]
        images += [("partition (label counts per client)", section.partition_image),
                   ("participation raster", section.participation_image)]
        for alt, path in images:
            link = _link(path, relative_to)
            if link:
                lines.append(f"![{_escape(alt)}]({link})")
        lines.append("")
        if section.client_rows:
            lines += ["### Per-client accuracy", "", NOTE, "", "| " + " | ".join(COLUMN_TITLES) + " |",
                      "|" + "|".join("---" for _ in COLUMN_TITLES) + "|"]
            lines += ["| " + " | ".join(_escape(c) for c in row_cells(row)) + " |" for row in section.client_rows]
            link = _link(section.client_plot, relative_to)
            lines += [""] + ([f"![per-client accuracy]({link})", ""] if link else [])
    if report.panels:
        lines += ["## Every table side by side", "", "One panel per table; a method has one colour throughout.", ""]
        lines += [f"![{_escape(key.replace('_', ' '))}]({_link(path, relative_to)})" for key, path in report.panels.items()]
        lines.append("")
    return "\n".join(lines)


def baseline_markdown(section: "ReportSection", relative_to: Path) -> list[str]:
    """A section's comparisons with the ``--baseline`` row (none without --baseline)."""
    from fedhet.lab.report.baseline import table_note

    table = section.baseline
    if table is None:
        return []
    if table.baseline is None:
        return [f"No row of this table is named {_escape(table.name)}: no comparison.", ""]
    lines = [f"### Against {_escape(table.baseline)}", "", table_note(table), "",
             "| " + " | ".join(BASELINE_TITLES) + " |", "|" + "|".join("---" for _ in BASELINE_TITLES) + "|"]
    lines += ["| " + " | ".join(_escape(cell) for cell in cells) + " |" for cells in baseline_cells(table)]
    link = _link(section.baseline_plot, relative_to)
    return lines + [""] + ([f"![paired differences against {_escape(table.baseline)}]({link})", ""] if link else [])


def render_console(report: "Report") -> str:
    """The tables for a terminal: Markdown without the images."""
    lines = [report.title, f"common setting: {assignments_text(headline_setting(report.common)) or '(none)'}", ""]
    for section in report.sections:
        lines += [f"## {section.title}", table_text(report, section), ""]
    lines.append(notes_text(report))
    return "\n".join(lines)
