"""``fedhet report``: its arguments, and the report from parsed command-line values to an exit code
(:mod:`fedhet.lab.commands.shared`'s codes: 0 success, 2 an input error whose message names what is wrong).
"""
from __future__ import annotations

import argparse
from typing import Optional, Sequence, TextIO

from fedhet.config import ConfigError
from fedhet.lab.commands.shared import EXIT_INPUT_ERROR, EXIT_OK, console_streams, say


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``report`` with its flags to the ``fedhet`` sub-command parsers."""
    report = subparsers.add_parser("report", help="tables (mean ± std over seeds) and plots from run directories",
                                   description="Group runs by setting and algorithm; write report.md, report.json, "
                                               "a self-contained report.html with plots and a tidy report.csv "
                                               "into --out.")
    report.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                        help="run directories, or directories holding them (a sweep's --out)")
    report.add_argument("--out", required=True, metavar="DIR", help="output directory of the report")
    report.add_argument("--target", metavar="ACC[,ACC]", help="accuracies for rounds-to-target columns, e.g. 0.8")
    report.add_argument("--group-by", metavar="KEY,...",
                        help="configuration keys that split the tables (default: the varying keys outside "
                             "algorithm/client/server)")
    report.add_argument("--last-rounds", type=int, metavar="N",
                        help="average the last N rounds instead of the last 10%% (FedAU: 200)")
    report.add_argument("--title", help="title of the report")
    report.add_argument("--baseline", metavar="NAME",
                        help="compare every row with this row (a method or variant name), paired by seed: a table "
                             "and a forest plot per section")
    report.add_argument("--latex", action="store_true", help="also write report.tex (booktabs, mean ± std, best in bold)")
    report.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """``fedhet report``: :func:`report_command` on the parsed flags."""
    return report_command(args.run_dirs, out=args.out, targets=args.target, group_by=args.group_by,
                          last_rounds=args.last_rounds, title=args.title, baseline=args.baseline,
                          latex=args.latex)


def parse_targets(text: Optional[str]) -> Optional[tuple[float, ...]]:
    if text is None:
        return None
    try:
        values = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ConfigError("--target", text, "accuracies in (0, 1], comma-separated, e.g. 0.8 or 0.8,0.85") from None
    if not values or any(not 0 < v <= 1 for v in values):
        raise ConfigError("--target", text, "accuracies in (0, 1], comma-separated, e.g. 0.8 or 0.8,0.85")
    return values


def report_command(run_dirs: Sequence[str], *, out: str, targets: Optional[str] = None,
                   group_by: Optional[str] = None, last_rounds: Optional[int] = None,
                   title: Optional[str] = None, baseline: Optional[str] = None, latex: bool = False,
                   stdout: Optional[TextIO] = None, stderr: Optional[TextIO] = None) -> int:
    from fedhet.lab.report.build import build_report, write_report
    from fedhet.lab.report.markdown import render_console
    from fedhet.lab.report.runs import RunDirectoryError, collect_runs

    stdout, stderr = console_streams(stdout, stderr)
    warnings: list[str] = []
    try:
        target_values = parse_targets(targets)
        keys = [key.strip() for key in group_by.split(",") if key.strip()] if group_by is not None else None
        if keys is not None and not keys:
            raise ConfigError("--group-by", group_by, "name at least one configuration key (KEY,...), "
                                                      "e.g. --group-by client.name,participation.name")
        runs = collect_runs(run_dirs, warn=warnings.append)
        report = build_report(runs, targets=target_values, group_by=keys, last_rounds=last_rounds,
                              title=title or "fedhet report", warnings=warnings, baseline=baseline)
    except (ConfigError, RunDirectoryError) as error:
        say(f"fedhet report: {error}", stderr)
        return EXIT_INPUT_ERROR
    files = write_report(report, out, latex=latex)
    for warning in warnings:
        say(f"fedhet report: warning: {warning}", stderr)
    say(render_console(report), stdout)
    say(f"Markdown report: {files.markdown}", stdout)
    say(f"HTML report:     {files.html.resolve()}", stdout)
    say(f"tidy CSV:        {files.csv}", stdout)
    if files.latex is not None:
        say(f"LaTeX tables:    {files.latex}", stdout)
    return EXIT_OK
