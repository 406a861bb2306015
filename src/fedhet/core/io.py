"""Atomic file writes: a reader (or a crash) never sees a half-written file.

Each writer writes a temporary file in the target's directory, flushes and fsyncs it, then
``os.replace``s it over the target (atomic on POSIX for paths on one filesystem).
"""
from __future__ import annotations

import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch


def _atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp creates 0600; results and reports are meant to be read (and served) by others.
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException as error:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        if isinstance(error, OSError) and error.filename is None and error.errno is not None:
            # A write or fsync that fails (ENOSPC) names no file; the one-line error must say which
            # (sweeps and tune would otherwise print ENOSPC without a path).
            raise OSError(error.errno, error.strerror or str(error), str(path)) from error
        raise


class NotAPlainFileError(OSError):
    """A small record file that is a FIFO, a device, a directory, or larger than records ever are."""


# summary.json, sweep_run.json and the like are a few kilobytes; this is far beyond any of them.
SMALL_FILE_LIMIT = 16 * 1024 * 1024


def read_small_file(path: str | os.PathLike, max_bytes: int = SMALL_FILE_LIMIT) -> bytes:
    """The bytes of a small record file, without blocking or filling memory on a hostile one: the
    file is opened non-blocking (a FIFO does not hang the reader), must be a regular file (not
    ``/dev/zero`` through a link), and at most ``max_bytes`` are read. Raises
    ``FileNotFoundError`` when absent, :class:`NotAPlainFileError` otherwise
    (docs/reliability.md, "Hangs")."""
    import stat

    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise NotAPlainFileError(f"{path}: not a regular file")
        # Read by the file's size, not by the limit: read(n) sets aside n bytes before reading, and
        # the limit may be far above what a file holds. A file that grows meanwhile is read on.
        chunks: list[bytes] = []
        total, want = 0, min(status.st_size, max_bytes) + 1
        with os.fdopen(fd, "rb", closefd=False) as handle:
            while total <= max_bytes:
                chunk = handle.read(want)
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
                want = min(1 << 20, max_bytes + 1 - total)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise NotAPlainFileError(f"{path}: larger than {max_bytes} bytes, more than this record ever holds")
    return data


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    _atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    _atomic_write_bytes(path, data)


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as indented JSON atomically."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, allow_nan=True) + "\n")


def atomic_torch_save(path: str | os.PathLike, obj: Any) -> None:
    """``torch.save`` to ``path`` atomically."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    _atomic_write_bytes(path, buffer.getvalue())


def atomic_savefig(figure, path: str | os.PathLike, **kwargs) -> None:
    """Save a matplotlib figure atomically (format from the suffix)."""
    path = Path(path)
    buffer = io.BytesIO()
    figure.savefig(buffer, format=path.suffix.lstrip(".") or "png", **kwargs)
    _atomic_write_bytes(path, buffer.getvalue())
