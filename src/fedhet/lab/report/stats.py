"""Per-run headline numbers and their mean and sample standard deviation over seeds.

Per run (from its evaluated-round records and its summary):

- ``final_accuracy``: test accuracy at the last evaluated round;
- ``best_accuracy``: the highest evaluated test accuracy (the hybrid paper's "top accuracy");
- ``last_accuracy``: the mean test accuracy over the evaluated rounds in the last window of the run's
  ``run.rounds`` rounds: the last 10% by default (FedAWARE Table 2), or the last ``N`` rounds
  (FedAU Table 1: the last 200 rounds, evaluated every 10);
- ``e_ludd``: the mean e-LUD over all rounds (FedAWARE Section 5), from the summary;
- ``seconds_per_round``: wall-clock seconds per round (FedSpeed Table 5), from the summary;
- rounds to a target accuracy: the first evaluated round whose accuracy reaches it (FedSpeed Table 4),
  or None when it never does.

Over the seeds of one setting: mean and **sample** standard deviation (``ddof = 1``, the usual
"mean ± std over seeds" of the papers); with one seed there is no std. Rounds to a target is
averaged over the seeds that reached it and reported with how many did (``k/n``).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional, Sequence

from fedhet.engine import rounds_to_target
from fedhet.lab.report.runs import RunData, finite

METRICS = ("final_accuracy", "best_accuracy", "last_accuracy", "e_ludd", "seconds_per_round")


@dataclasses.dataclass(frozen=True)
class Stat:
    """Mean and sample std (``ddof = 1``; None for fewer than two values) of the finite values."""

    mean: Optional[float]
    std: Optional[float]
    n: int
    values: tuple[Optional[float], ...]


@dataclasses.dataclass(frozen=True)
class TargetStat:
    """Rounds (or virtual seconds) to ``target``: the mean over the ``reached`` seeds that reached it,
    out of ``n``."""

    target: float
    mean: Optional[float]
    std: Optional[float]
    reached: int
    n: int
    values: tuple[Optional[float], ...]


def describe(values: Sequence[Any]) -> Stat:
    """:class:`Stat` of ``values``; missing and non-finite values are left out of mean and std."""
    kept = [v for v in (finite(value) for value in values) if v is not None]
    n = len(kept)
    mean = sum(kept) / n if n else None
    std = math.sqrt(sum((v - mean) ** 2 for v in kept) / (n - 1)) if mean is not None and n >= 2 else None
    return Stat(mean, std, n, tuple(finite(value) for value in values))


def describe_rounds(target: float, rounds: Sequence[Optional[float]]) -> TargetStat:
    reached = [r for r in rounds if r is not None]
    stat = describe(reached)
    return TargetStat(target, stat.mean, stat.std, len(reached), len(rounds), tuple(rounds))


def window_mean(records: Sequence[dict[str, Any]], total_rounds: int, *, fraction: float = 0.1,
                last_rounds: Optional[int] = None, key: str = "test_accuracy") -> Optional[float]:
    """Mean of ``key`` over evaluated rounds ``t > T - w``, ``w = last_rounds`` or ``ceil(fraction T)``
    (at least 1); the last evaluated record when none falls in the window (a run cut short)."""
    width = last_rounds if last_rounds is not None else max(1, math.ceil(fraction * total_rounds - 1e-9))
    values = [r[key] for r in records if key in r and r["round"] > total_rounds - width]
    if not values:
        values = [records[-1][key]] if records and key in records[-1] else []
    return sum(values) / len(values) if values else None


def run_metrics(run: RunData, *, last_fraction: float = 0.1, last_rounds: Optional[int] = None) -> dict[str, Optional[float]]:
    """The per-run numbers of the module docstring."""
    records = run.records
    accuracies = [r["test_accuracy"] for r in records]
    summary = run.summary or {}
    if "e_ludd" in summary:
        e_ludd = finite(summary.get("e_ludd"))
    else:   # an unfinished run: the mean over its evaluated rounds only
        e_luds = [v for v in (finite(r.get("e_lud")) for r in records) if v is not None]
        e_ludd = sum(e_luds) / len(e_luds) if e_luds else None
    if "seconds_per_round" in summary:
        seconds = finite(summary.get("seconds_per_round"))
    else:
        last = records[-1]
        seconds = finite(last.get("wall_seconds", math.nan) / max(int(last["round"]), 1))
    return {
        "final_accuracy": finite(accuracies[-1]),
        "best_accuracy": finite(max(accuracies)),
        "last_accuracy": finite(window_mean(records, run.config.run.rounds, fraction=last_fraction,
                                            last_rounds=last_rounds)),
        "e_ludd": e_ludd,
        "seconds_per_round": seconds,
    }


def run_rounds_to_target(run: RunData, target: float) -> Optional[int]:
    return rounds_to_target(run.records, target)


def run_seconds_to_target(run: RunData, target: float) -> Optional[float]:
    """The virtual seconds (docs/system.md) at the first evaluated round reaching ``target``; None when
    the run did not reach it or has no clock."""
    for record in run.records:
        if record.get("test_accuracy", -math.inf) >= target:
            return finite(record.get("virtual_seconds"))
    return None


def run_virtual_seconds(run: RunData) -> Optional[float]:
    """The virtual clock at the run's last record (None without a clock)."""
    return finite(run.records[-1].get("virtual_seconds")) if run.records else None
