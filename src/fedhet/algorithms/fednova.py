"""``algorithm = "fednova"``: local SGD (``client.name = "sgd"``) with the ``fednova`` server method
(:mod:`fedhet.server.fednova`); both halves are built by :func:`fedhet.algorithms.build`."""
from __future__ import annotations

from fedhet.core.registry import register_algorithm

register_algorithm("fednova", client="sgd", server="fednova")
