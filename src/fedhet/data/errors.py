"""The error raised when a dataset file is missing, truncated or not in the expected format."""
from __future__ import annotations

from fedhet.errors import FedhetError


class DatasetFileError(FedhetError, ValueError):
    """A dataset file (or directory) is missing, unreadable or malformed.

    The message names the file and says what was expected, so the user can fix or re-fetch it.
    """
