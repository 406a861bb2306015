"""The rule for every name that becomes a file or directory name (``run.name``, a sweep's base name,
a variant name): one path component, printable, of bounded length.

A name is valid when it

- is not empty, at most :data:`MAX_NAME_LENGTH` characters long and at most
  :data:`MAX_NAME_BYTES` bytes in UTF-8 (file systems allow 255 bytes per path component);
- is printable (``str.isprintable``: no newline, tab, NUL or other control character, which would
  break ``config.toml``, logs and shell commands);
- holds no path separator (``/``, and ``\\`` which is one on Windows) and is not ``.`` or ``..``,
  so that ``out_dir / name`` is always a direct child of ``out_dir`` (without a separator, ``..``
  is dangerous only as the whole name: ``lr=1..2`` or a sweep's ``data.root=.._data`` stay valid);
- does not start with ``-`` (it would read as an option on a command line).

See docs/reliability.md, "Inputs and errors".
"""
from __future__ import annotations

from pathlib import Path

from fedhet.core.options import ConfigError

MAX_NAME_LENGTH = 200
MAX_NAME_BYTES = 255


def name_problem(name: object, *, max_length: int = MAX_NAME_LENGTH) -> str | None:
    """Why ``name`` cannot be a path component, or None when it can (module docstring)."""
    if not isinstance(name, str):
        return "expected a string"
    if not name:
        return "must not be empty"
    if len(name) > max_length:
        return f"at most {max_length} characters (got {len(name)})"
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return f"at most {MAX_NAME_BYTES} bytes in UTF-8 (a file name's limit)"
    if not name.isprintable():
        return "printable characters only (no newline, tab, NUL or other control character)"
    if "/" in name or "\\" in name:
        return "a single name without '/' or '\\' (it becomes a directory name)"
    if name in (".", ".."):
        return "must not be '.' or '..' (it becomes a directory name)"
    if name.startswith("-"):
        return "must not start with '-'"
    return None


def check_name(key: str, name: object, *, max_length: int = MAX_NAME_LENGTH) -> str:
    """``name`` when it is a valid path component, else a :class:`ConfigError` on ``key``."""
    problem = name_problem(name, max_length=max_length)
    if problem is not None:
        raise ConfigError(key, name, problem)
    return name  # type: ignore[return-value]


def child_path(parent: str | Path, name: str, *, key: str) -> Path:
    """``parent / name`` after checking that ``name`` is a valid path component, so the result is a
    direct child of ``parent`` (never outside it, whatever ``name`` holds)."""
    return Path(parent) / check_name(key, name)
