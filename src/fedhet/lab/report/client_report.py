"""The report's per-client accuracy: a table and a distribution plot per section, for runs that
evaluated clients (``run.client_eval_every > 0``; see ``docs/experiments.md``).

Per run, the statistics of its last record that has them (``client_accuracy_mean``, ``_std``,
``_worst10``, ``_best10``); per row, their mean ± sample std over seeds, like the main table. The plot
is the empirical CDF of the per-client accuracies at the last client evaluation
(``client_accuracy.json``), one line per row with the clients of all its seeds pooled.
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from fedhet.core import atomic_savefig
from fedhet.engine import CLIENT_RECORD_KEYS
from fedhet.lab.report.grouping import Group
from fedhet.lab.report.stats import Stat, describe
from fedhet.lab.report.tables import mean_std_text

CLIENT_FILE = "client_accuracy.json"
COLUMN_TITLES = ("algorithm", "seeds", "client mean acc. (%)", "client std (pp)", "worst-10% acc. (%)",
                 "best-10% acc. (%)", "round")
NOTE = ("Per-client accuracy of the global model at the last per-client evaluation: the mean and population "
        "std over clients, and the mean accuracy of the worst and of the best ceil(10% of N) clients; each "
        "cell is mean ± sample std over seeds.")


@dataclasses.dataclass(frozen=True)
class ClientRow:
    name: str
    seeds: int
    stats: dict[str, Stat]
    rounds: tuple[int, ...]


def _last_client_record(records: Sequence[dict]) -> Optional[dict]:
    with_clients = [r for r in records if CLIENT_RECORD_KEYS[0] in r]
    return with_clients[-1] if with_clients else None


def client_rows(groups: Sequence[Group]) -> list[ClientRow]:
    """One row per group that has per-client statistics (none when no run evaluated clients)."""
    rows = []
    for group in groups:
        last = [record for record in (_last_client_record(run.records) for run in group.runs) if record is not None]
        if not last:
            continue
        rows.append(ClientRow(group.display or group.label, len(last),
                              {key: describe([r[key] for r in last]) for key in CLIENT_RECORD_KEYS},
                              tuple(int(r["round"]) for r in last)))
    return rows


def row_cells(row: ClientRow) -> list[str]:
    rounds = sorted(set(row.rounds))
    return [row.name, str(row.seeds),
            *(mean_std_text(row.stats[key].mean, row.stats[key].std, ".2f", 100.0) for key in CLIENT_RECORD_KEYS),
            ", ".join(str(r) for r in rounds)]


def _client_accuracies(group: Group) -> np.ndarray:
    values: list[float] = []
    for run in group.runs:
        path = Path(run.path) / CLIENT_FILE
        if path.is_file():
            values += [v for v in json.loads(path.read_text(encoding="utf-8"))["accuracy"] if v is not None]
    return np.sort(np.asarray(values, dtype=np.float64))


def plot_client_distribution(groups: Sequence[Group], path: str | os.PathLike, *, title: str) -> bool:
    """Empirical CDF of per-client accuracy per group; False (nothing written) without data."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from fedhet.lab.report.plots import distinct_colours, wrapped_title

    curves = [(group, _client_accuracies(group)) for group in groups]
    curves = [(group, values) for group, values in curves if values.size]
    if not curves:
        return False
    figure = Figure(figsize=(8.0, 4.2), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for (group, values), colour in zip(curves, distinct_colours(len(curves))):
        fraction = np.arange(1, values.size + 1) / values.size
        axes.step(values, fraction, where="post", color=colour, linewidth=1.4,
                  label=f"{group.display or group.label} ({values.size} clients)")
    axes.set_xlabel("client accuracy (global model, client's own data)")
    axes.set_ylabel("fraction of clients")
    axes.set_xlim(-0.02, 1.02)
    axes.set_ylim(0, 1.02)
    axes.set_title(wrapped_title(title), fontsize=10)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    atomic_savefig(figure, path, dpi=100)
    return True
