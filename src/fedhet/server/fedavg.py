"""FedAvg (McMahan et al., 2017), with a server learning rate (Reddi et al., 2021)."""
from __future__ import annotations

from fedhet.core.registry import SERVERS
from fedhet.server.averaging import WeightedAverageAggregator
from fedhet.server.base import ComposedServer, ServerOptions, SGDOptimizer
from fedhet.server.methods import server_method


@SERVERS.register("fedavg", ServerOptions, gradient_step=True)
def make_fedavg(options: ServerOptions) -> ComposedServer:
    """FedAvg: G = sum_S (n_i / n_S) g_i;  x <- x - eta_g G."""
    return server_method(WeightedAverageAggregator(), SGDOptimizer(options.learning_rate), options)
