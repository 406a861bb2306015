"""Run directories as one tidy table for analysis in Python: :func:`load_runs`.

One row per evaluated round of every run found (``round``, ``test_accuracy``, ``train_loss``, ...
as ``metrics.jsonl`` records them), with the columns that say which run it is: ``run`` (the run
directory's name), ``path``, ``label`` (the sweep variant's name, else the algorithm, as
``fedhet report`` labels rows), ``algorithm``, ``client``, ``server`` and ``seed``. A pandas
``DataFrame`` when pandas is installed, else the same rows as a list of dicts; pandas is never
required.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from fedhet.lab.report.runs import algorithm_label, collect_runs


def run_rows(paths: str | Path | Sequence[str | Path], *,
             warn: Callable[[str], None] = lambda message: None) -> list[dict[str, Any]]:
    """The rows of :func:`load_runs` as a list of dicts (whatever is installed)."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    rows = []
    for run in collect_runs(list(paths), warn=warn):
        config = run.config
        identity = {"run": run.path.name, "path": str(run.path), "label": run.label,
                    "algorithm": algorithm_label(config), "client": config.client.name,
                    "server": config.server.name, "seed": config.run.seed}
        for record in run.records:
            rows.append({**identity, **record})
    return rows


def load_runs(paths: str | Path | Sequence[str | Path], *, as_records: bool = False,
              warn: Callable[[str], None] = lambda message: None):
    """Every evaluated round of the runs under ``paths`` (a run directory, a directory holding run
    directories such as a sweep's ``--out``, or a list of them), one row per run and round.

    Returns a ``pandas.DataFrame`` when pandas is importable (and ``as_records`` is false), else a
    list of dicts with the same keys. Runs that have no evaluated round yet are left out (``warn``
    is told which); a path that is not a run raises
    :class:`fedhet.lab.report.runs.RunDirectoryError`.
    """
    rows = run_rows(paths, warn=warn)
    if as_records:
        return rows
    try:
        import pandas
    except ImportError:
        return rows
    return pandas.DataFrame.from_records(rows)
