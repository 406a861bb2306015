"""The error of a search that cannot run as asked."""
from __future__ import annotations

from fedhet.errors import FedhetError


class TuneError(FedhetError, ValueError):
    """A search cannot be set up, resumed or finished as asked; the message names what is wrong."""
