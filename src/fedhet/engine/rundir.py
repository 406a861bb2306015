"""The files fedhet owns in a run directory, and how a fresh run clears them.

A fresh run, and ``--overwrite``, start from nothing of an old run: every file in
:data:`OWN_FILES`, every file of ``stores/`` matching :data:`STORE_FILE`, and every temporary file
left by an interrupted atomic write (``.<own file>.<random>.tmp``) is removed. Nothing else is:
a user's notes, a plot copied next to the run, or any file fedhet does not write stay where they
are, and the directory itself is never removed (docs/reliability.md).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

from fedhet.engine.checkpoint import CHECKPOINT_NAME, PREVIOUS_NAME

# Written by fedhet.engine.runner (and its callbacks) in a run directory.
OWN_FILES = (
    "config.toml", "metrics.jsonl", "metrics.bad.jsonl", "summary.json", CHECKPOINT_NAME, PREVIOUS_NAME,
    "partition.csv", "partition.png", "participation.pt", "participation.png",
    "participation_probabilities.png",
)
# Written by a sweep in each of its run directories (cleared only when the sweep replaces a run).
SWEEP_FILES = ("sweep_run.json", "sweep.log")
STORES_DIR = "stores"
# Memory-mapped stores and their snapshots (fedhet.core.store): store-<name>.bin, store-<name>.snapshot-<k>.bin
STORE_FILE = re.compile(r"\.?store-[A-Za-z0-9_.-]+?(\.snapshot-\d+)?\.bin(\.tmp)?")
# fedhet.core.io's atomic writers: .<target>.<mkstemp suffix>.tmp
_TEMPORARY = re.compile(r"\.(?P<target>.+)\.[A-Za-z0-9_]+\.tmp")


def is_own_temporary(name: str, owned: Iterable[str] = OWN_FILES + SWEEP_FILES) -> bool:
    """Whether ``name`` is a temporary file of an atomic write of one of the ``owned`` files."""
    match = _TEMPORARY.fullmatch(name)
    return bool(match) and match.group("target") in set(owned)


def remove_stale_temporaries(run_dir: Path) -> list[Path]:
    """Remove temporaries that an interrupted atomic write left (``.checkpoint.pt.abc123.tmp``, ...).
    Only call this while holding the directory's lock: a live writer's temporary would go too."""
    removed = []
    if not run_dir.is_dir():
        return removed
    for path in run_dir.iterdir():
        if path.is_file() and is_own_temporary(path.name):
            path.unlink(missing_ok=True)
            removed.append(path)
    stores = run_dir / STORES_DIR
    if stores.is_dir():
        for path in stores.iterdir():
            if path.is_file() and path.name.startswith(".") and STORE_FILE.fullmatch(path.name):
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed


def clear_run_directory(run_dir: Path, *, sweep_files: bool = False) -> list[Path]:
    """Remove fedhet's own files from ``run_dir`` (module docstring); returns what was removed.
    ``sweep_files`` also removes a sweep's ``sweep_run.json`` and ``sweep.log``."""
    removed = []
    if not run_dir.is_dir():
        return removed
    names = OWN_FILES + (SWEEP_FILES if sweep_files else ())
    for name in names:
        path = run_dir / name
        if path.is_file() or path.is_symlink():
            path.unlink()
            removed.append(path)
    stores = run_dir / STORES_DIR
    if stores.is_dir():
        for path in stores.iterdir():
            if (path.is_file() or path.is_symlink()) and STORE_FILE.fullmatch(path.name):
                path.unlink()
                removed.append(path)
        try:
            stores.rmdir()           # only when nothing else is in it
        except OSError:
            pass
    removed += remove_stale_temporaries(run_dir)
    return removed
