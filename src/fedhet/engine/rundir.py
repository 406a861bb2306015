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
from fedhet.errors import FedhetError

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


class LinkedRunDirectoryError(FedhetError, OSError):
    """A folder fedhet writes and clears inside a run directory is a symbolic link."""


def refuse_linked_folders(run_dir: Path, names: Iterable[str]) -> None:
    """Refuse a run directory whose folder ``name`` (``stores/``, ``tensorboard/``, ...) is a
    symbolic link, or exists and is not a directory: fedhet deletes and writes files there, and a
    run directory is untrusted input, so a planted link must not redirect that outside it
    (docs/reliability.md, "Security")."""
    for name in names:
        path = run_dir / name
        if path.is_symlink():
            raise LinkedRunDirectoryError(
                f"{path} is a symbolic link; fedhet writes and deletes files in this folder and does not "
                "follow links out of a run directory: replace it with a real folder or remove it")
        if path.exists() and not path.is_dir():
            raise LinkedRunDirectoryError(f"{path} is not a folder; fedhet writes its files there: remove it")


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
    if stores.is_dir() and not stores.is_symlink():
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
    if stores.is_dir() and not stores.is_symlink():     # never clear through a planted link
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
