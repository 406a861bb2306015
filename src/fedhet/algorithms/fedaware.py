"""FedAWARE (Zeng et al., AISTATS 2025)

FedAWARE as a server method, and ``algorithm = "fedaware"`` (local SGD, ``client.name = "sgd"``, with
it). The direction machinery is :mod:`fedhet.server.fedaware`; the rule is docs/algorithms.md section 3.

Rule table server:
    | FedAWARE | see section 3 | |
"""
from __future__ import annotations

from fedhet.core.registry import SERVERS, register_algorithm
from fedhet.server.aware_options import AwareOptions
from fedhet.server.base import ComposedServer, SGDOptimizer
from fedhet.server.fedaware import DirectionSettings, FedAwareAggregator, FedAwareOptions
from fedhet.server.methods import server_method


@SERVERS.register("fedaware", FedAwareOptions, gradient_step=True)
def make_fedaware(options: FedAwareOptions) -> ComposedServer:
    """FedAWARE (Zeng et al., AISTATS 2025): step along the min-norm combination of per-client momenta.

    m_i <- (1-alpha) m_i + alpha g_i on S; lambda = min-norm weights of the momenta on the simplex;
    x <- x - eta_g sum lambda_i m_i (unit-normalised momenta by default)."""
    settings = DirectionSettings.of(AwareOptions.read(options), uniform_weights=options.uniform_weights,
                                    store_name="fedaware_momentum", option_prefix="server.")
    return server_method(FedAwareAggregator(settings), SGDOptimizer(options.learning_rate), options)


register_algorithm("fedaware", client="sgd", server="fedaware")
