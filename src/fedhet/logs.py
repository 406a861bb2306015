"""fedhet's messages go through the standard :mod:`logging` module, under the ``fedhet`` logger.

Library modules log to ``logging.getLogger(__name__)`` (``fedhet.engine.runner``, ...) and never
configure logging: an application decides where messages go. Without any configuration, Python
prints WARNING and above to stderr and drops the rest; to see a run's INFO messages (the backend
chosen, a resume) from Python::

    import logging
    logging.basicConfig(level=logging.INFO)          # or logging.getLogger("fedhet").setLevel(...)

The command line calls :func:`configure_cli_logging` once: INFO and above on stderr by default,
WARNING and above with ``--quiet``, everything (DEBUG) with ``--verbose``.
"""
from __future__ import annotations

import logging
import sys
from typing import Optional, TextIO

LOGGER_NAME = "fedhet"
QUIET, NORMAL, VERBOSE = -1, 0, 1
_LEVELS = {QUIET: logging.WARNING, NORMAL: logging.INFO, VERBOSE: logging.DEBUG}


class _CliFormatter(logging.Formatter):
    """``message`` for INFO and DEBUG; ``warning: message`` (``error: ...``) above, so they stand out."""

    def format(self, record: logging.LogRecord) -> str:
        message = super().format(record)
        if record.levelno >= logging.WARNING:
            return f"{record.levelname.lower()}: {message}"
        return message


class _StderrHandler(logging.Handler):
    """Writes to whatever ``sys.stderr`` is at the time of each message (a test's capture included)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:  # logging's own rule: a failing handler reports and carries on
            self.handleError(record)


def configure_cli_logging(verbosity: int = NORMAL, stream: Optional[TextIO] = None) -> logging.Handler:
    """Send the ``fedhet`` logger's messages at ``verbosity`` (:data:`QUIET`, :data:`NORMAL` or
    :data:`VERBOSE`) to ``stream`` (default: stderr). For command-line entry points only; calling it
    again replaces the handler it installed before (tests call the CLI many times in one process)."""
    if verbosity not in _LEVELS:
        raise ValueError(f"verbosity {verbosity!r}: allowed {sorted(_LEVELS)}")
    logger = logging.getLogger(LOGGER_NAME)
    for old in [h for h in logger.handlers if getattr(h, "_fedhet_cli", False)]:
        logger.removeHandler(old)
    handler = logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    handler._fedhet_cli = True  # type: ignore[attr-defined]
    handler.setFormatter(_CliFormatter("%(message)s"))
    logger.addHandler(handler)
    logger.setLevel(_LEVELS[verbosity])
    return handler
