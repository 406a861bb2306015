"""``algorithm = "fedavg"``: local SGD (``client.name = "sgd"``) with the ``fedavg`` server method
(:mod:`fedhet.server.fedavg`); both halves are built by :func:`fedhet.algorithms.build`."""
from __future__ import annotations

from fedhet.core.registry import register_algorithm

register_algorithm("fedavg", client="sgd", server="fedavg")
