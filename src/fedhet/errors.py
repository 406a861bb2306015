"""The one base class of errors that are the user's to fix (a bad config, a missing or corrupt file,
a run that diverged, a run directory in use).

The command line prints such an error as one line, ``fedhet: <message>``, with a non-zero exit and
no traceback; anything else is a bug, reported as one ``fedhet: internal error ...`` line that says
to rerun with ``--debug`` for the traceback (:mod:`fedhet.error_lines`). Library code raises a subclass that
also derives from the matching built-in type (``ValueError``, ``FileNotFoundError``, ...), so callers
that catch the built-in keep working.
"""
from __future__ import annotations


class FedhetError(Exception):
    """An error whose message alone tells the user what is wrong and what is allowed."""
