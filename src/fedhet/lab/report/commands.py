"""The ``fedhet report`` command, from parsed command-line values to exit codes (those of
:mod:`fedhet.lab.sweep.commands`: 0 success, 2 an input error whose message names what is wrong).
"""
from __future__ import annotations

from typing import Optional, Sequence, TextIO

from fedhet.config import ConfigError
from fedhet.lab.sweep.commands import EXIT_INPUT_ERROR, EXIT_OK, console_streams


def _print(message: str, stream: TextIO) -> None:
    print(message, file=stream, flush=True)


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
        _print(f"fedhet report: {error}", stderr)
        return EXIT_INPUT_ERROR
    files = write_report(report, out, latex=latex)
    for warning in warnings:
        _print(f"fedhet report: warning: {warning}", stderr)
    _print(render_console(report), stdout)
    _print(f"Markdown report: {files.markdown}", stdout)
    _print(f"HTML report:     {files.html.resolve()}", stdout)
    _print(f"tidy CSV:        {files.csv}", stdout)
    if files.latex is not None:
        _print(f"LaTeX tables:    {files.latex}", stdout)
    return EXIT_OK
