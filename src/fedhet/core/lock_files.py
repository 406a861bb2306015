"""Opening a lock file in a directory that may hold planted files.

A lock file is truncated and written (its holder's PID), and the directories that hold one (a run
directory, an output directory with an MLflow store) are untrusted input: the file is opened without
following a symbolic link and kept only when it is a regular file with one name, so neither a planted
link nor a hard link to another file is ever written through (docs/reliability.md). Used by the run
directory's lock (``fedhet.engine.rundir_lock``) and the MLflow store's (``fedhet.tracking.mlflow``).
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from fedhet.errors import FedhetError


class LockFileError(FedhetError, OSError):
    """The lock's path is a symbolic link, not a regular file, or a hard link (a hostile or damaged
    directory)."""


def open_lock_file(path: Path) -> int:
    """Open (or create) the lock file ``path`` read-write; :class:`LockFileError` for a symbolic
    link, anything but a regular file, or a file with more than one name."""
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as error:
        if error.errno == errno.ELOOP or path.is_symlink():
            raise LockFileError(f"{path} is a symbolic link; fedhet does not follow it (it would write "
                                "through it): remove the link") from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise LockFileError(f"{path} is not a regular file; remove it (fedhet recreates its lock file)")
    if info.st_nlink > 1:
        # A hard link shares its target's data: truncating the lock would truncate that file.
        os.close(fd)
        raise LockFileError(f"{path} has {info.st_nlink} names (a hard link to another file); fedhet truncates "
                            "and writes its lock file, so it refuses it: remove it (fedhet recreates it)")
    return fd
