"""Callbacks around the round loop (evaluation records, logging, checkpointing, early stop, progress).

A callback sees each round's record after it is complete and may ask the loop to stop. The runner
calls, in order: ``on_run_start(run)``, then per round ``on_round_end(run, record) -> bool`` (True
asks to stop after this round), then ``on_run_end(run, summary)``. ``record`` is the round's metrics
dict; it has ``test_accuracy`` only on evaluated rounds. ``run`` is the live :class:`RunHandle`.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Optional

from fedhet.core.io import atomic_write_text


class Callback:
    def on_run_start(self, run: Any) -> None:
        pass

    def on_round_end(self, run: Any, record: dict[str, Any]) -> bool:
        return False

    def on_run_end(self, run: Any, summary: dict[str, Any]) -> None:
        pass


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Records of a ``metrics.jsonl``; unreadable lines (a write cut by a crash or a full disk, an
    edit) are skipped and the records after them kept. :func:`scan_metrics` also says which lines."""
    return scan_metrics(path).records


@dataclasses.dataclass
class MetricsScan:
    """A tolerant read of ``metrics.jsonl``: its records, and the lines that are not records
    (``(1-based line number, text)``)."""

    records: list[dict[str, Any]]
    bad_lines: list[tuple[int, str]]

    def describe_bad(self, path: Path) -> str:
        numbers = ", ".join(str(number) for number, _text in self.bad_lines[:10])
        more = f" and {len(self.bad_lines) - 10} more" if len(self.bad_lines) > 10 else ""
        return f"{path}: {len(self.bad_lines)} unreadable line(s) (line {numbers}{more}) left out"


def scan_metrics(path: Path) -> MetricsScan:
    """Every parsable record of ``path`` (a JSON object with an integer ``round``) and every other
    line with its number; blank lines are neither."""
    if not path.is_file():
        return MetricsScan([], [])
    records, bad = [], []
    text = path.read_bytes().decode("utf-8", errors="replace")
    # split("\n"), not splitlines(): line numbers must be those of an editor or `sed -n`.
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError):     # a 100000-deep array is a bad line too
            record = None
        if isinstance(record, dict) and isinstance(record.get("round"), int):
            records.append(record)
        else:
            bad.append((number, line))
    return MetricsScan(records, bad)


def set_aside_bad_lines(path: Path, scan: MetricsScan) -> Optional[Path]:
    """Append ``scan``'s bad lines to ``metrics.bad.jsonl`` next to ``path`` as
    ``{"line": n, "text": ...}`` records (atomically, keeping earlier ones); returns that file."""
    if not scan.bad_lines:
        return None
    aside = path.with_name(path.stem + ".bad.jsonl")
    earlier = aside.read_text(encoding="utf-8") if aside.is_file() else ""
    added = "".join(json.dumps({"file": path.name, "line": number, "text": text}) + "\n"
                    for number, text in scan.bad_lines)
    atomic_write_text(aside, earlier + added)
    return aside


def write_fully(fd: int, data: bytes, path: Optional[os.PathLike | str] = None) -> None:
    """``os.write`` until every byte is written (a short write, e.g. on a nearly full disk, is
    continued; an error such as ENOSPC is raised), then fsync. ``os.write`` and ``os.fsync`` raise
    errors that name no file; with ``path`` given, such an error is raised again naming it, so the
    one-line error says which file the disk refused."""
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            if written <= 0:
                raise OSError(f"write returned {written}")
            view = view[written:]
        os.fsync(fd)
    except OSError as error:
        if path is None or error.filename is not None or error.errno is None:
            raise
        raise OSError(error.errno, error.strerror or str(error), str(path)) from error


class MetricsWriter(Callback):
    """Appends one JSON line per evaluated round to ``metrics.jsonl``.

    Each record is written in full (:func:`write_fully`: short writes continued) and fsynced, so
    after a crash the file holds whole records plus at most one torn line, which
    :func:`scan_metrics` reports; on resume the runner sets such lines aside in
    ``metrics.bad.jsonl`` and rewrites the file atomically with the records up to the checkpoint.
    """

    def __init__(self, path: Path):
        self.path = path

    def on_round_end(self, run, record):
        if "test_accuracy" not in record:
            return False
        line = json.dumps(record, sort_keys=True, allow_nan=True) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            write_fully(fd, line.encode("utf-8"), self.path)
        finally:
            os.close(fd)
        return False


def checkpoint_due(round_number: int, every: int, rounds: int) -> bool:
    """Whether :class:`CheckpointCallback` saves after ``round_number`` (every ``every`` rounds and
    at the last round); the trackers (``fedhet.tracking``) send rounds by the same rule."""
    return round_number % every == 0 or round_number == rounds


class CheckpointCallback(Callback):
    """Saves the checkpoint every ``every`` rounds and at the last round."""

    def __init__(self, every: int):
        self.every = every

    def on_round_end(self, run, record):
        if checkpoint_due(record["round"], self.every, run.config.run.rounds):
            run.save_checkpoint()
        return False


class TargetAccuracy(Callback):
    """Stops the run once ``test_accuracy >= target`` (when asked to)."""

    def __init__(self, target: float):
        self.target = target

    def on_round_end(self, run, record):
        return record.get("test_accuracy", -math.inf) >= self.target


class ProgressBar(Callback):
    """A progress bar with the round, the latest accuracy and the time left (tqdm on a terminal,
    a plain line every 10% of the rounds otherwise, so CI logs stay short)."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.bar = None
        self.accuracy: Optional[float] = None
        self.accuracy_round = 0
        self.started = 0.0
        self.first_round = 0

    def on_run_start(self, run):
        total = run.config.run.rounds
        self.first_round = run.next_round
        self.started = time.perf_counter()
        if self.stream.isatty():
            from tqdm import tqdm
            self.bar = tqdm(total=total, initial=run.next_round, desc=run.config.run.name, unit="round",
                            file=self.stream, dynamic_ncols=True)

    def on_round_end(self, run, record):
        if "test_accuracy" in record:
            self.accuracy, self.accuracy_round = record["test_accuracy"], record["round"]
        total = run.config.run.rounds
        # The accuracy shown is the latest evaluation's (run.eval_every): its round is said when it
        # is not the round just finished, so an old number never reads as the current one.
        stale = self.accuracy is not None and self.accuracy_round != record["round"]
        if self.bar is not None:
            self.bar.update(1)
            if self.accuracy is not None:
                self.bar.set_postfix(acc=f"{self.accuracy:.4f}" + (f" (round {self.accuracy_round})" if stale else ""),
                                     refresh=False)
        elif record["round"] % max(1, total // 10) == 0 or record["round"] == total:
            done = record["round"] - self.first_round
            elapsed = time.perf_counter() - self.started
            left = elapsed / max(done, 1) * (total - record["round"])
            acc = f"{self.accuracy:.4f}" if self.accuracy is not None else "-"
            if stale:
                acc += f" (round {self.accuracy_round})"
            print(f"[{run.config.run.name}] round {record['round']}/{total}  acc {acc}  "
                  f"elapsed {elapsed:.0f}s  left ~{left:.0f}s", file=self.stream, flush=True)
        return False

    def on_run_end(self, run, summary):
        if self.bar is not None:
            self.bar.close()


def rewrite_metrics(path: Path, records: list[dict[str, Any]]) -> None:
    atomic_write_text(path, "".join(json.dumps(r, sort_keys=True, allow_nan=True) + "\n" for r in records))
