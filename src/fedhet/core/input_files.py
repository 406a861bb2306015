"""Reading a user's input file (an availability trace, a profile file) as text or JSON.

Every way such a file can be unreadable becomes the caller's one-line error (a ``TraceError``, a
``ProfileError``) naming the file, instead of a Python exception that would read as a bug in fedhet:

- missing, or not a regular file (a FIFO is opened without blocking, a directory or ``/dev/zero``
  is not read);
- not UTF-8 text (a UTF-8 byte-order mark, as spreadsheet programs write one, is accepted and dropped);
- JSON that is malformed, or nested so deep that the parser runs out of stack.
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable

from fedhet.core.io import NotAPlainFileError, read_small_file

# Traces and profiles of FedScale's 500k clients are tens of megabytes; far more is not an input file.
INPUT_FILE_LIMIT = 1024 * 1024 * 1024

Fail = Callable[[str], Exception]


def read_input_text(path: str | os.PathLike, fail: Fail, *, max_bytes: int = INPUT_FILE_LIMIT) -> str:
    """The text of ``path`` (UTF-8, an optional byte-order mark dropped); ``fail(message)`` is raised
    for a missing file, one that is not a regular file, or one that is not UTF-8."""
    try:
        data = read_small_file(path, max_bytes)
    except FileNotFoundError:
        raise fail(f"{path}: no such file") from None
    except NotAPlainFileError:
        raise fail(f"{path}: not a regular file (a directory, FIFO or device); give a text file") from None
    except IsADirectoryError:
        raise fail(f"{path}: a directory; give a text file") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise fail(f"{path}: not UTF-8 text (byte {error.start}); save it as UTF-8") from None


def parse_input_json(text: str, source: str, fail: Fail) -> Any:
    """``json.loads(text)``; ``fail(message)`` for malformed JSON or nesting too deep to parse."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise fail(f"{source}: not valid JSON ({error})") from None
    except RecursionError:
        raise fail(f"{source}: JSON nested too deeply to read; the file's schema is a few levels deep") from None
