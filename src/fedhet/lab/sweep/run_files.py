"""A run directory as data: read its files into a mapping, write such a mapping back atomically.

A sweep on a Ray cluster without a shared filesystem runs each run in a temporary directory on the
node that got it and ships the run directory's files (bytes) back to the sweep's machine
(:mod:`fedhet.lab.sweep.ray_executor`); a resumed run's files travel the other way first. This
module is both ends of that copy, independent of Ray.

What is copied: every regular file under the directory, relative paths with ``/``, except the
directory lock (:data:`fedhet.engine.rundir_lock.LOCK_NAME`), temporaries of interrupted atomic
writes (``.<name>.<random>.tmp``) and the sweep's log (shipped as lines, appended by the driver).

The order of :func:`write_run_files` keeps the directory resumable at every instant: first the
ordinary files (``metrics.jsonl``, per-client store files, plots ...), then
``checkpoint.prev.pt``, then ``checkpoint.pt``, then the removal of files the run deleted (old
store snapshots), and ``summary.json`` last, because a complete summary marks the run finished
(:func:`fedhet.lab.sweep.plan.run_state`). Each file is written atomically (:mod:`fedhet.core.io`).
A crash part-way leaves metrics ahead of the checkpoint at worst, which a resume trims
(:func:`fedhet.engine.runner.run_experiment`).
"""
from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import Iterable, Mapping, Optional

from fedhet.core import append_log_text, atomic_write_bytes
from fedhet.engine import CHECKPOINT_NAME, LOCK_NAME, PREVIOUS_NAME
from fedhet.errors import FedhetError
from fedhet.lab.sweep.worker import LOG_FILE as SWEEP_LOG

SUMMARY = "summary.json"
_LAST = (PREVIOUS_NAME, CHECKPOINT_NAME)

# (inode, size, mtime in ns): a file rewritten by an atomic replace gets a new inode.
Signature = tuple[int, int, int]


class RunFilesError(FedhetError, ValueError):
    """Shipped run files that cannot be written: a path outside the run directory."""


def _skipped(relative: PurePosixPath) -> bool:
    name = relative.name
    return (name == LOCK_NAME or (name.startswith(".") and name.endswith(".tmp"))
            or str(relative) == SWEEP_LOG)


def file_signatures(run_dir: Path) -> dict[str, Signature]:
    """Relative path -> signature of every file that :func:`read_run_files` would copy."""
    run_dir = Path(run_dir)
    signatures: dict[str, Signature] = {}
    if not run_dir.is_dir():
        return signatures
    for root, _dirs, files in os.walk(run_dir):
        for name in files:
            path = Path(root) / name
            relative = PurePosixPath(path.relative_to(run_dir).as_posix())
            if _skipped(relative) or path.is_symlink():    # never ship a link's target
                continue
            try:
                stat = path.stat()
            except FileNotFoundError:       # removed while we walked
                continue
            if path.is_file():
                signatures[str(relative)] = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
    return signatures


def read_run_files(run_dir: Path, names: Optional[Iterable[str]] = None) -> dict[str, bytes]:
    """The bytes of the run directory's files (all that are copied, or only ``names``)."""
    run_dir = Path(run_dir)
    wanted = sorted(file_signatures(run_dir) if names is None else names)
    out = {}
    for name in wanted:
        path = run_dir / name
        if path.is_symlink():          # a planted link would ship its target's bytes
            continue
        try:
            out[name] = path.read_bytes()
        except FileNotFoundError:
            continue
    return out


class ChangeTracker:
    """The files of a directory that changed (or appeared, or went) since the last call."""

    def __init__(self, run_dir: Path, known: Optional[Mapping[str, Signature]] = None):
        self.run_dir = Path(run_dir)
        self.known: dict[str, Signature] = dict(known or {})

    def changes(self) -> tuple[dict[str, bytes], list[str]]:
        """``(changed files with their bytes, removed relative paths)``."""
        now = file_signatures(self.run_dir)
        changed = [name for name, signature in now.items() if self.known.get(name) != signature]
        removed = sorted(set(self.known) - set(now))
        self.known = now
        return read_run_files(self.run_dir, changed), removed


def _target(run_dir: Path, name: str) -> Path:
    relative = PurePosixPath(name)
    if relative.is_absolute() or not relative.parts or ".." in relative.parts or _skipped(relative):
        raise RunFilesError(f"shipped run file {name!r}: not a plain relative path inside the run directory")
    return run_dir.joinpath(*relative.parts)


def write_run_files(run_dir: Path, files: Mapping[str, bytes], removed: Iterable[str] = ()) -> None:
    """Write shipped ``files`` into ``run_dir`` and delete ``removed``, in the order of the module
    docstring, each file atomically."""
    run_dir = Path(run_dir)
    targets = {name: _target(run_dir, name) for name in files}
    gone = [_target(run_dir, name) for name in removed if name not in files]
    ordinary = sorted(name for name in files if name not in _LAST and name != SUMMARY)
    for name in ordinary + [name for name in _LAST if name in files]:
        atomic_write_bytes(targets[name], files[name])
    for path in gone:
        path.unlink(missing_ok=True)
    if SUMMARY in files:
        atomic_write_bytes(targets[SUMMARY], files[SUMMARY])


def append_log(run_dir: Path, lines: Iterable[str]) -> None:
    """Append shipped log lines to the run's ``sweep.log``."""
    lines = list(lines)
    if lines:
        with append_log_text(Path(run_dir) / SWEEP_LOG) as handle:    # never through a planted link
            handle.write("".join(line if line.endswith("\n") else line + "\n" for line in lines))
