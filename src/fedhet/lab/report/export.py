"""The report for a paper: a tidy ``report.csv`` and a LaTeX (booktabs) table per section.

``report.csv`` has one line per run and metric: ``run`` (the run directory's name), ``label`` (the
row's method or variant), one column per setting key that differs between the runs, ``seed``,
``metric`` and ``value`` (empty when the run has none), the long form that pandas, R or a
spreadsheet pivot directly. The metrics are the report's per-run numbers
(:data:`fedhet.lab.report.stats.METRICS`), ``rounds_to_<target>`` per target, and the per-client
statistics of the last per-client evaluation when the run has them.

``report.tex`` (``fedhet report --latex``) holds one ``table`` per section: the accuracy columns and
e-LUDD as ``mean $\\pm$ std`` over seeds (sample std, like the Markdown table), the best mean of each
column in bold; it needs ``\\usepackage{booktabs}``.
"""
from __future__ import annotations

import csv
import io
from typing import Any, Optional

from fedhet.engine import CLIENT_RECORD_KEYS
from fedhet.lab.report.data import Report, ReportSection
from fedhet.lab.report.grouping import format_value, varying_keys
from fedhet.lab.report.stats import METRICS
from fedhet.lab.report.tables import ACCURACY_METRICS, STD_NOTE, best_rows

CSV_FIXED = ("run", "label")


def _client_values(records) -> dict[str, Optional[float]]:
    last = [record for record in records if CLIENT_RECORD_KEYS[0] in record]
    return {key: last[-1].get(key) for key in CLIENT_RECORD_KEYS} if last else {}


def report_csv(report: Report) -> str:
    """``report.csv``'s text (see the module docstring)."""
    groups = [row.group for section in report.sections for row in section.rows]
    keys = varying_keys(groups)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*CSV_FIXED, *keys, "seed", "metric", "value"])
    for section in report.sections:
        for row in section.rows:
            for index, run in enumerate(row.group.runs):
                setting = [format_value(row.group.setting.get(key)) if key in row.group.setting else ""
                           for key in keys]
                values: dict[str, Any] = {name: row.metrics[name].values[index] for name in METRICS}
                for target in row.targets:
                    values[f"rounds_to_{target.target:g}"] = target.values[index]
                for target in row.time_targets:
                    values[f"virtual_seconds_to_{target.target:g}"] = target.values[index]
                if row.virtual_seconds is not None:
                    values["virtual_seconds"] = row.virtual_seconds.values[index]
                values.update(_client_values(run.records))
                for metric, value in values.items():
                    writer.writerow([run.path.name, row.name, *setting, run.seed, metric,
                                     "" if value is None else repr(float(value))])
    return out.getvalue()


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(char, char) for char in str(text))


def _latex_cell(mean: Optional[float], std: Optional[float], scale: float) -> str:
    if mean is None:
        return "--"
    return f"{scale * mean:.2f}" if std is None else f"{scale * mean:.2f} $\\pm$ {scale * std:.2f}"


LATEX_COLUMNS = (("final_accuracy", "final acc. (\\%)", 100.0), ("best_accuracy", "best acc. (\\%)", 100.0),
                 ("last_accuracy", "{window} acc. (\\%)", 100.0), ("e_ludd", "e-LUDD", 1.0))


def section_latex(report: Report, section: ReportSection, index: int) -> str:
    columns = [(name, title.replace("{window}", latex_escape(report.window)), scale)
               for name, title, scale in LATEX_COLUMNS]
    best = {name: best_rows([row.metrics[name].mean for row in section.rows]) for name in ACCURACY_METRICS}
    lines = ["\\begin{table}[t]", "\\centering", "\\small",
             f"\\caption{{{latex_escape(section.title)}: mean $\\pm$ {latex_escape(STD_NOTE)}; best mean in bold.}}",
             f"\\label{{tab:fedhet-section{index + 1}}}",
             "\\begin{tabular}{l" + "r" * (len(columns) + 1) + "}", "\\toprule",
             " & ".join(["method", "seeds"] + [title for _name, title, _scale in columns]) + " \\\\", "\\midrule"]
    for position, row in enumerate(section.rows):
        cells = [latex_escape(row.name), str(len(row.group.seeds))]
        for name, _title, scale in columns:
            cell = _latex_cell(row.metrics[name].mean, row.metrics[name].std, scale)
            cells.append(f"\\textbf{{{cell}}}" if position in best.get(name, set()) else cell)
        lines.append(" & ".join(cells) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}", "\\end{table}"]
    return "\n".join(lines)


def report_latex(report: Report) -> str:
    """``report.tex``'s text: one booktabs table per section."""
    header = f"% {latex_escape(report.title)}: written by fedhet report; needs \\usepackage{{booktabs}}\n"
    return header + "\n\n".join(section_latex(report, section, index)
                                for index, section in enumerate(report.sections)) + "\n"
