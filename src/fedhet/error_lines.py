"""How the command line reports an error: one line ``fedhet: ...`` and an exit status.

The rule (docs/reliability.md, "Inputs and errors"):

- a user error is one the user can fix without changing fedhet: a :class:`~fedhet.errors.FedhetError`
  (bad configuration, dataset file, diverged run, ...), or an :class:`OSError` from the file system
  (no space left, read-only file system, permission denied, a file where a directory is expected),
  or running out of memory. It prints as one line and exits with :data:`EXIT_USER_ERROR` (configuration and input errors) or
  :data:`EXIT_OS_ERROR` (the file system refused);
- anything else is a bug in fedhet. It too prints one line, naming the exception type and saying
  to rerun with ``--debug``, and exits with :data:`EXIT_INTERNAL_ERROR`: a traceback would bury the
  one thing the user can do (rerun with ``--debug`` and report it);
- with ``--debug`` every error propagates with its traceback.

Messages are made one line: embedded line breaks (a dataset error listing the directories it
searched) become ``"; "``.
"""
from __future__ import annotations

import errno

from fedhet.errors import FedhetError

EXIT_OS_ERROR = 1
EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 3

# What the user can do about the file-system errors fedhet meets in practice.
_OS_HINTS = {
    errno.ENOSPC: "no space left on the device: free space, or choose another run.out_dir",
    errno.EDQUOT: "disk quota exceeded: free space, or choose another run.out_dir",
    errno.EROFS: "read-only file system: choose a writable run.out_dir (or --out)",
    errno.EACCES: "permission denied: choose a directory you may write to",
    errno.EPERM: "operation not permitted: choose a directory you may write to",
    errno.ENOTDIR: "a path component is a file, not a directory: choose another run.out_dir (or --out)",
    errno.EISDIR: "a directory is in the way where a file is expected",
    errno.EEXIST: "already exists",
    errno.ENOENT: "no such file or directory",
}


def one_line(text: str) -> str:
    """``text`` with its line breaks (and the indentation after them) replaced by ``"; "``."""
    parts = [part.strip() for part in str(text).splitlines() if part.strip()]
    line = ""
    for index, part in enumerate(parts):
        # "Searched:" followed by a list reads "Searched: a; b", not "Searched:; a; b".
        line += part if index == 0 else (" " if line.endswith(":") else "; ") + part
    return line


def os_error_text(error: OSError) -> str:
    """``<path>: <what happened>`` for a file-system error, with what to do about it."""
    paths = [str(p) for p in (error.filename, error.filename2) if p is not None]
    hint = _OS_HINTS.get(error.errno or -1)
    reason = hint or error.strerror or str(error)
    if error.errno is not None and error.errno in errno.errorcode:
        reason += f" ({errno.errorcode[error.errno]})"
    if not paths:
        # Some callers raise OSError with only a message (or wrap one): keep it.
        detail = str(error) if error.strerror is None else ""
        return one_line(f"{detail}: {reason}" if detail and detail != reason else reason)
    return one_line(f"{' -> '.join(paths)}: {reason}")


def is_out_of_memory(error: BaseException) -> bool:
    """Python's MemoryError, PyTorch's GPU out-of-memory error, or its CPU allocator's failure
    (a RuntimeError whose message is the only mark it has)."""
    if isinstance(error, MemoryError):
        return True
    try:
        import torch
        if isinstance(error, torch.OutOfMemoryError):
            return True
    except (ImportError, AttributeError):  # pragma: no cover - torch is a dependency
        pass
    return isinstance(error, RuntimeError) and "can't allocate memory" in str(error)


def is_user_error(error: BaseException) -> bool:
    return isinstance(error, (FedhetError, OSError)) or is_out_of_memory(error)


def error_line(error: BaseException) -> tuple[str, int]:
    """The one line to print (``fedhet: ...``) and the exit status for ``error``."""
    if isinstance(error, FedhetError):
        from fedhet.core.options import ConfigError

        prefix = "configuration error: " if isinstance(error, ConfigError) else ""
        return f"fedhet: {prefix}{one_line(str(error))}", EXIT_USER_ERROR
    if isinstance(error, (FileNotFoundError, FileExistsError)) and error.errno is None:
        # Raised by fedhet itself with a full message (e.g. "run directory ... already holds a run").
        return f"fedhet: {one_line(str(error))}", EXIT_USER_ERROR
    if isinstance(error, OSError):
        return f"fedhet: {os_error_text(error)}", EXIT_OS_ERROR
    if is_out_of_memory(error):
        return (f"fedhet: out of memory ({one_line(str(error))[:300]}); use fewer clients or rounds, a smaller "
                f"run.store_dtype or run.store_mmap = true"), EXIT_OS_ERROR
    kind = type(error).__name__
    text = one_line(str(error))
    return (f"fedhet: internal error ({kind}{': ' + text if text else ''}); this is a bug in fedhet, "
            f"rerun with --debug for the traceback and report it"), EXIT_INTERNAL_ERROR
