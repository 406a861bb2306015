"""What a search writes into its out directory, each file atomically:

- ``trials.csv`` / ``trials.json``: one row per trial (number, state, the searched values, the
  criterion's value, and the test accuracy at the last round in a column of its own, recorded for
  the report and never used to choose);
- ``best.json``: the chosen trial, its values and criterion value;
- ``best.toml``: the chosen values as a TOML snippet to paste into an experiment file.

An Optuna search's ``trials.json`` and ``best.json`` also hold ``optuna``: the Optuna version and
the sampler's flags (:func:`fedhet.lab.tuning.optuna_search.study_record`).
"""
from __future__ import annotations

import csv
import dataclasses
import io
import math
from pathlib import Path
from typing import Any, Optional, Sequence

from fedhet.config import toml_literal
from fedhet.core import atomic_write_json, atomic_write_text
from fedhet.lab.tuning.criteria import Criterion

COMPLETE, PRUNED, FAILED = "complete", "pruned", "failed"


@dataclasses.dataclass
class TrialRecord:
    number: int
    name: str
    values: dict[str, Any]
    state: str                              # complete | pruned | failed
    value: Optional[float]                  # the criterion (None: pruned before its round)
    test_accuracy: Optional[float] = None   # reported apart; never read by the choice
    error: Optional[str] = None


def _number(value: Optional[float]) -> Any:
    if value is None:
        return None
    return value if math.isfinite(value) else str(value)


def trial_rows(trials: Sequence[TrialRecord], keys: Sequence[str], criterion: Criterion) -> list[dict[str, Any]]:
    return [{"trial": t.number, "state": t.state, **{key: t.values.get(key) for key in keys},
             criterion.text: _number(t.value), "test_accuracy (not used)": _number(t.test_accuracy),
             "error": t.error or ""} for t in trials]


def best_toml(values: dict[str, Any], comment: str) -> str:
    """``[section]`` tables of the chosen ``section.key`` values (``algorithm`` at the top)."""
    lines = [f"# {line}" for line in comment.splitlines()]
    if "algorithm" in values:
        lines.append(f"algorithm = {toml_literal(values['algorithm'])}")
    sections: dict[str, list[str]] = {}
    for key, value in values.items():
        if key != "algorithm":
            section, name = key.split(".", 1)
            sections.setdefault(section, []).append(f"{name} = {toml_literal(value)}")
    for section, entries in sections.items():
        lines += ["", f"[{section}]", *entries]
    return "\n".join(lines) + "\n"


def _sampler_text(sampler: str, study: Optional[dict[str, Any]]) -> str:
    """``optuna 5.0.0, TPESampler(multivariate=False, ...)``: the sampler as the results name it."""
    if study is None:
        return sampler
    flags = ", ".join(f"{key}={value}" for key, value in study["flags"].items())
    return f"{sampler} {study['version']}, {study['sampler']}({flags})"


def write_results(out_dir: Path, trials: Sequence[TrialRecord], keys: Sequence[str], criterion: Criterion,
                  best: Optional[TrialRecord], *, sampler: str, command: str,
                  study: Optional[dict[str, Any]] = None) -> None:
    """``study``: an Optuna search's version and sampler flags
    (:func:`fedhet.lab.tuning.optuna_search.study_record`), recorded under ``optuna``."""
    rows = trial_rows(trials, keys, criterion)
    recorded = {"optuna": study} if study is not None else {}
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]) if rows else ["trial"], lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(out_dir / "trials.csv", buffer.getvalue())
    atomic_write_json(out_dir / "trials.json", {"criterion": criterion.text, "direction": criterion.direction,
                                                "sampler": sampler, **recorded, "trials": rows})
    if best is None:
        return
    atomic_write_json(out_dir / "best.json", {
        "trial": best.number, "values": best.values, "criterion": criterion.text,
        "direction": criterion.direction, "value": _number(best.value), "sampler": sampler, **recorded,
        "trials": len(trials), "command": command,
        "note": "chosen by the criterion only; test metrics are in trials.csv and were not used"})
    comment = (f"fedhet tune ({_sampler_text(sampler, study)}; {len(trials)} trials): chosen by {criterion.text} "
               f"({criterion.direction}) = {best.value:.6g}, trial {best.number}\n{command}")
    atomic_write_text(out_dir / "best.toml", best_toml(best.values, comment))


def format_table(trials: Sequence[TrialRecord], keys: Sequence[str], criterion: Criterion,
                 best: Optional[TrialRecord]) -> str:
    """A plain-text table of the trials for the terminal (the chosen one marked ``*``)."""
    header = ["", "trial", "state", *keys, criterion.text, "test acc (not used)"]
    rows = []
    for t in trials:
        mark = "*" if best is not None and t.number == best.number else ""
        value = "" if t.value is None else f"{t.value:.6g}"
        test = "" if t.test_accuracy is None else f"{t.test_accuracy:.4f}"
        rows.append([mark, str(t.number), t.state, *[str(t.values.get(k)) for k in keys], value, test])
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header, *rows])
