"""One writer per run directory: an OS file lock held for the life of the writing process.

``fcntl.flock`` on ``<dir>/.fedhet.lock``, exclusive and non-blocking. The kernel releases it when
the process exits, however it exits (SIGKILL included), so a crashed writer never leaves a stale
lock behind (forked children do not inherit it: they close its descriptor); the file itself stays and is harmless. After taking the lock the writer records its
PID in the file, so a second writer is refused with a message that names the holder.

Taken by ``fedhet run``, ``fedhet run --resume`` and every run of a sweep (on the run's directory,
inside :func:`fedhet.engine.runner.run_experiment`), and by a sweep on its output directory for the
sweep's whole life (two sweeps on one ``--out`` would interleave records).
"""
from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Optional

from fedhet.core.lock_files import open_lock_file
from fedhet.errors import FedhetError

LOCK_NAME = ".fedhet.lock"

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows has no flock; fedhet's locking is POSIX only
    fcntl = None  # type: ignore[assignment]

# Descriptors of the locks this process holds. A flock belongs to the open file description, which
# a forked child shares: a child that outlived a killed writer (a worker of the multi-process
# backend) would keep the directory locked. Forked children therefore close them at once.
_HELD_FDS: set[int] = set()


def _close_held_in_child() -> None:
    for fd in list(_HELD_FDS):
        try:
            os.close(fd)
        except OSError:
            pass
    _HELD_FDS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_held_in_child)


class RunDirectoryInUseError(FedhetError, RuntimeError):
    """Another live process holds the directory's lock."""


class DirectoryLock:
    """An exclusive lock on a directory; use as a context manager or :meth:`acquire`/:meth:`release`.

    ``what`` names the directory's role in the error message ("run directory", "sweep directory").
    Re-entrant within one object only: acquiring twice from two objects in one process is refused
    like any second writer (flock locks belong to open file descriptions, not processes).
    """

    def __init__(self, directory: str | os.PathLike, what: str = "run directory"):
        self.directory = Path(directory)
        self.what = what
        self.path = self.directory / LOCK_NAME
        self._fd: Optional[int] = None
        self._owner = 0

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> "DirectoryLock":
        if self._fd is not None:
            return self
        if fcntl is None:  # pragma: no cover
            return self
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = open_lock_file(self.path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            holder = _read_holder(fd)
            os.close(fd)
            if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise RunDirectoryInUseError(
                    f"{self.what} {self.directory} is in use by process {holder or '(unknown PID)'} "
                    "(another fedhet run, resume, sweep, tune or claims run); wait for it to finish or stop it") from None
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._fd, self._owner = fd, os.getpid()
        _HELD_FDS.add(fd)
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        if self._owner != os.getpid():
            return            # a forked child: the descriptor was closed at the fork (see _HELD_FDS)
        _HELD_FDS.discard(fd)
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
        os.close(fd)          # closing the last descriptor releases the flock

    def __enter__(self) -> "DirectoryLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _read_holder(fd: int) -> Optional[str]:
    try:
        text = os.pread(fd, 64, 0).decode("ascii", errors="replace").strip()
    except OSError:
        return None
    return text if text.isdigit() else None
