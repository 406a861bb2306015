"""Log files that fedhet appends to inside a run directory (a sweep run's ``sweep.log``).

A run directory is untrusted input: a planted symbolic link, a hard link to a file elsewhere, a
FIFO or a device in place of a log would make an append write outside the directory, or block.
The log is therefore opened without following a link (``O_NOFOLLOW``), without blocking
(``O_NONBLOCK``, so a FIFO is refused rather than waited on), and kept only when it is a regular
file with one name (``st_nlink == 1``); anything else is refused with one line that says to remove it.
Reading the end of a log back applies the same checks and reads a bounded number of bytes.
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from fedhet.errors import FedhetError


class UnsafeLogFileError(FedhetError, OSError):
    """A log in a run directory is a link, not a regular file, or has other names (hard links)."""


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


def _refused(path: Path, why: str) -> UnsafeLogFileError:
    return UnsafeLogFileError(f"{path} {why}; fedhet appends to this log and does not write through it: "
                              "remove it (fedhet creates a new one)")


def _checked(fd: int, path: Path) -> int:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise _refused(path, "is not a regular file")
    if info.st_nlink > 1:
        os.close(fd)
        raise _refused(path, f"has {info.st_nlink} names (a hard link to another file)")
    return fd


def _open(path: Path, flags: int) -> int:
    try:
        return os.open(path, flags | _NOFOLLOW | _NONBLOCK, 0o644)
    except OSError as error:
        if error.errno == errno.ELOOP or (error.errno != errno.ENOENT and path.is_symlink()):
            raise _refused(path, "is a symbolic link") from None
        if error.errno == errno.ENXIO:            # a FIFO with no reader, opened for writing
            raise _refused(path, "is not a regular file") from None
        raise


def check_log_file(path: str | os.PathLike) -> None:
    """Refuse ``path`` unless it is absent or a regular file with one name (module docstring)."""
    path = Path(path)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        raise _refused(path, "is a symbolic link")
    if not stat.S_ISREG(info.st_mode):
        raise _refused(path, "is not a regular file")
    if info.st_nlink > 1:
        raise _refused(path, f"has {info.st_nlink} names (a hard link to another file)")


def open_log_for_append(path: str | os.PathLike) -> int:
    """A descriptor appending to ``path`` (created when absent), blocking again once opened; refuses
    anything but a regular file with one name (module docstring)."""
    path = Path(path)
    fd = _checked(_open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), path)
    os.set_blocking(fd, True)
    return fd


def append_log_text(path: str | os.PathLike):
    """``open_log_for_append`` as a text file object (UTF-8), for ``with ... as handle``."""
    return os.fdopen(open_log_for_append(path), "a", encoding="utf-8")


def read_log_tail(path: str | os.PathLike, lines: int = 6, max_bytes: int = 64 * 1024) -> str:
    """The last ``lines`` lines of the log (from at most its last ``max_bytes``); "" when absent.
    A log that is not a regular file with one name is refused (module docstring)."""
    path = Path(path)
    try:
        fd = _checked(_open(path, os.O_RDONLY), path)
    except FileNotFoundError:
        return ""
    try:
        size = os.fstat(fd).st_size
        data = os.pread(fd, max_bytes, max(0, size - max_bytes))
    finally:
        os.close(fd)
    return "\n".join(data.decode("utf-8", errors="replace").splitlines()[-lines:])
