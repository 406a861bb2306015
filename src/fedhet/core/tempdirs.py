"""Temporary directories tagged with the process that owns them, so that what a killed process left
behind is removed by the next one (docs/reliability.md, "Data loss").

A process killed with SIGKILL (a Ray task cancelled with ``force=True``, a driver killed) never runs its
``finally`` blocks, so its temporary directory stays. Each directory here is named
``<prefix><pid>-<random>``; :func:`remove_orphaned_temp_dirs` removes those whose process no longer
exists. A reused PID only keeps a directory longer, never removes a live one.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Optional


def owned_temp_dir(prefix: str, parent: Optional[str] = None) -> Path:
    """A new temporary directory named after this process (see the module docstring)."""
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=parent))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:      # exists, owned by someone else
        return True
    return True


def remove_orphaned_temp_dirs(prefix: str, parent: Optional[str] = None) -> list[Path]:
    """Remove ``<prefix><pid>-*`` directories in ``parent`` (the system's temporary directory) whose
    process is gone; returns them."""
    parent_dir = Path(parent or tempfile.gettempdir())
    pattern = re.compile(re.escape(prefix) + r"(\d+)-[^/]+")
    removed = []
    try:
        entries = list(parent_dir.iterdir())
    except OSError:
        return removed
    for path in entries:
        match = pattern.fullmatch(path.name)
        if not match or path.is_symlink() or not path.is_dir() or _alive(int(match.group(1))):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed
