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
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise


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
