"""``algorithm = "fedaware"``: local SGD (``client.name = "sgd"``) with the ``fedaware`` server method
(:mod:`fedhet.server.fedaware`); both halves are built by :func:`fedhet.algorithms.build`."""
from __future__ import annotations

from fedhet.registry import register_algorithm

register_algorithm("fedaware", client="sgd", server="fedaware")
