"""FedAvg (McMahan et al., 2017), with a server learning rate (Reddi et al., 2021)."""
from __future__ import annotations

from fedhet.core.registry import SERVERS, register_algorithm
from fedhet.server.base import ComposedServer, ServerOptions, ServerSGD, WeightedAverage, compose


@SERVERS.register("fedavg", ServerOptions)
def make_fedavg(options: ServerOptions) -> ComposedServer:
    """FedAvg: G = sum_S (n_i / n_S) g_i;  x <- x - eta_g G."""
    return compose(WeightedAverage(), ServerSGD(options.learning_rate), options)


register_algorithm("fedavg", client="sgd", server="fedavg")
