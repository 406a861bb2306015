"""Run directories as data for reports: configuration, evaluated-round records, summary, label.

A run directory holds ``config.toml`` and ``metrics.jsonl`` (and, once finished, ``summary.json``);
see :func:`fedhet.engine.runner.run_experiment`. A directory that is not a run but holds run
directories (a sweep's output directory) stands for all of them.
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from fedhet.config import ConfigError, ExperimentConfig, load_config
from fedhet.core import NotAPlainFileError, read_small_file
from fedhet.engine import scan_metrics
from fedhet.errors import FedhetError
from fedhet.lab.sweep.plan import SWEEP_FILE, SWEEP_RUN_FILE, read_summary, summary_is_complete


class RunDirectoryError(FedhetError, ValueError):
    """A path given to the report is not a usable run directory; the message says why."""


@dataclasses.dataclass
class RunData:
    path: Path
    config: ExperimentConfig
    records: list[dict[str, Any]]           # evaluated rounds, in order
    summary: Optional[dict[str, Any]]       # None while the run has not finished
    sweep: dict[str, Any]                   # sweep_run.json ({} for runs not made by a sweep)

    @property
    def seed(self) -> int:
        return self.config.run.seed

    @property
    def complete(self) -> bool:
        return summary_is_complete(self.summary, self.config.run.rounds)

    @property
    def label(self) -> str:
        """The row label: the sweep variant's name, else :func:`algorithm_label`."""
        return self.sweep.get("label") or algorithm_label(self.config)


def algorithm_label(config: ExperimentConfig) -> str:
    """``algorithm`` when named; else the server's name for plain local SGD, the common name when
    client and server share it (``scaffold``), else ``client+server``."""
    if config.algorithm:
        return config.algorithm
    client, server = config.client.name, config.server.name
    if client == "sgd" or client == server:
        return server
    return f"{client}+{server}"


def load_run(path: str | Path, *, warn: Callable[[str], None] = lambda message: None) -> RunData:
    """Read one run directory; :class:`RunDirectoryError` when it is not a run or has no records.
    Unreadable lines of ``metrics.jsonl`` are left out with a warning naming their line numbers
    (the records after them are used)."""
    path = Path(path)
    if not path.is_dir():
        raise RunDirectoryError(f"{path}: no such directory")
    if not (path / "config.toml").is_file():
        raise RunDirectoryError(f"{path} is not a fedhet run directory (no config.toml)")
    try:
        config = load_config(path / "config.toml")
    except ConfigError as error:
        raise RunDirectoryError(f"{path}: its config.toml does not load: {error}") from None
    try:
        scan = scan_metrics(path / "metrics.jsonl")
        records = [r for r in _checked_records(path, scan.records) if "test_accuracy" in r]
        summary = read_summary(path)
    except (UnicodeDecodeError, OSError) as error:
        raise RunDirectoryError(f"{path}: its files cannot be read ({type(error).__name__}: {error})") from None
    if scan.bad_lines:
        warn(scan.describe_bad(path / "metrics.jsonl"))
    if summary is not None and not isinstance(summary, dict):
        raise RunDirectoryError(f"{path}: summary.json holds a {type(summary).__name__}, not an object")
    rounds = (summary or {}).get("rounds", 0)
    if not isinstance(rounds, int) or isinstance(rounds, bool):
        raise RunDirectoryError(f"{path}: summary.json has rounds = {rounds!r}, not an integer")
    if not records:
        raise RunDirectoryError(f"{path} has no evaluated rounds in metrics.jsonl (the run has not reached "
                                f"its first evaluation, run.eval_every = {config.run.eval_every})")
    try:
        sweep = json.loads(read_small_file(path / SWEEP_RUN_FILE).decode("utf-8"))
    except (FileNotFoundError, NotAPlainFileError, json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        sweep = {}
    if not isinstance(sweep, dict):
        sweep = {}
    return RunData(path, config, records, summary, sweep)


def _checked_records(path: Path, records: list[Any]) -> list[dict[str, Any]]:
    """``records`` when each is an object with an integer ``round`` and numbers (or null) for the
    metrics a report reads; else a :class:`RunDirectoryError` naming the first bad record."""
    for index, record in enumerate(records, start=1):
        problem = None
        if not isinstance(record, dict):
            problem = f"a {type(record).__name__}, not an object"
        elif not isinstance(record.get("round"), int) or isinstance(record.get("round"), bool):
            problem = f"round = {record.get('round')!r}, not an integer"
        else:
            for key in _NUMERIC_KEYS:
                value = record.get(key)
                if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                    problem = f"{key} = {value!r}, not a number"
                    break
        if problem:
            raise RunDirectoryError(f"{path / 'metrics.jsonl'}: record {index} is malformed: {problem}")
    return records


# The record fields a report computes with (fedhet.lab.report.stats).
_NUMERIC_KEYS = ("test_accuracy", "test_loss", "train_loss", "e_lud", "wall_seconds")


def _ordered_children(path: Path) -> list[Path]:
    """The run directories inside ``path``: in the order of the sweep's plan (``sweep.json``: the
    variants file's order, then grid values, then seeds) when there is one, the others by name."""
    children = sorted(child for child in path.iterdir() if child.is_dir() and (child / "config.toml").is_file())
    try:
        planned = [entry["name"] for entry in json.loads((path / SWEEP_FILE).read_text(encoding="utf-8"))["runs"]]
    except (FileNotFoundError, json.JSONDecodeError, KeyError, TypeError):
        return children
    rank = {name: index for index, name in enumerate(planned)}
    return sorted(children, key=lambda child: (rank.get(child.name, len(rank)), child.name))


def collect_runs(paths: Sequence[str | Path], *, warn: Callable[[str], None] = lambda message: None) -> list[RunData]:
    """The runs named by ``paths``: each a run directory, or a directory whose subdirectories are runs.

    A run named directly must be readable (else :class:`RunDirectoryError`); runs found inside a
    directory that cannot be read yet (no evaluated round) are left out with a warning. The same
    run named twice counts once.
    """
    runs: list[RunData] = []
    seen: set[Path] = set()
    for given in paths:
        path = Path(given)
        if not path.is_dir():
            raise RunDirectoryError(f"{path}: no such directory")
        if (path / "config.toml").is_file():
            found = [load_run(path, warn=warn)]
        else:
            children = _ordered_children(path)
            if not children:
                raise RunDirectoryError(f"{path} is not a fedhet run directory (no config.toml) and holds no "
                                        "run directories")
            found = []
            for child in children:
                try:
                    found.append(load_run(child, warn=warn))
                except RunDirectoryError as error:
                    warn(f"left out: {error}")
            if not found:
                raise RunDirectoryError(f"{path}: none of its {len(children)} run directories has evaluated rounds yet")
        for run in found:
            key = run.path.resolve()
            if key not in seen:
                seen.add(key)
                runs.append(run)
    return runs


def finite(value: Any) -> Optional[float]:
    """``value`` as a float, or None when missing or not finite."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None
