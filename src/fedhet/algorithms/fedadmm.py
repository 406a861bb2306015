"""FedADMM (Wang, Marella, Anderson, CDC 2022): the ``fedadmm`` solver (:mod:`fedhet.client.fedadmm`,
which also defines the anchor ``x^0`` it needs) with ``x <- x + (eta_g / N) sum_{i in S} change_i``."""
from __future__ import annotations

from fedhet.core.registry import SERVERS, register_algorithm
from fedhet.server.averaging import AverageAllAggregator
from fedhet.server.base import ComposedServer, ServerOptions, SGDOptimizer
from fedhet.server.methods import server_method


@SERVERS.register("fedadmm", ServerOptions, gradient_step=True)
def make_fedadmm_server(options: ServerOptions) -> ComposedServer:
    """FedADMM's server: x <- x + (eta_g/N) sum_S change_i."""
    # The sum over this round's clients divided by all N ("average all" in the FedAU paper).
    return server_method(AverageAllAggregator(), SGDOptimizer(options.learning_rate), options)


register_algorithm("fedadmm", client="fedadmm", server="fedadmm")
