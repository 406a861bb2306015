"""How every named server method is made from its stages, with the options common to all of them."""
from __future__ import annotations

from typing import Optional

from fedhet.server.base import Aggregator, ComposedServer, ServerOptimizer, ServerOptions, compose


def server_method(aggregator: Aggregator, optimizer: ServerOptimizer, options: ServerOptions, *,
                  not_a_gradient_step: Optional[str] = None) -> ComposedServer:
    """The named method ``aggregator`` + ``optimizer`` with the step transforms ``options`` asks for."""
    return compose(aggregator, optimizer, options, aware_incompatible=not_a_gradient_step)
