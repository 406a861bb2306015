"""FedDyn's server half (Acar et al., ICLR 2021, Algorithm 1), built with the ``feddyn`` solver's
``alpha`` (:mod:`fedhet.client.feddyn`): one option, ``client.alpha``, read by both halves."""
from __future__ import annotations

from typing import NamedTuple

import torch

from fedhet.client.feddyn import FedDynOptions
from fedhet.core.registry import SERVERS, NotAGradientStep, register_algorithm
from fedhet.server.base import ComposedServer, ServerContext, ServerOptions, SGDOptimizer
from fedhet.server.methods import server_method

NOT_A_GRADIENT_STEP = NotAGradientStep("FedDyn's server sets x <- mean_S w_i - h/alpha, which is not a gradient step")


class FedDynState(NamedTuple):
    """:class:`FedDynAggregator`'s state: the server's ``h``."""

    h: torch.Tensor


class FedDynAggregator:
    """FedDyn's server rule as a pseudo-gradient (state ``h``, zero at first)::

        h <- h - alpha (1/N) sum_S delta_i
        G  = -(1/|S|) sum_S delta_i + h / alpha

    so that ``x - G = mean_S w_i - h/alpha`` (Acar et al. 2021, Algorithm 1) when the server
    optimiser is SGD with ``eta_g = 1``. A round nobody trained leaves ``x`` and ``h`` unchanged.
    ``alpha`` is FedDyn's ``client.alpha``; FedSpeed's released-code variant uses the same rule with
    ``alpha = 1/lambda``.
    """

    def __init__(self, alpha: float):
        self.alpha = alpha

    def init(self, params: torch.Tensor, context: ServerContext) -> FedDynState:
        return FedDynState(h=torch.zeros_like(params))

    def aggregate(self, state, cohort, context):
        if len(cohort) == 0:
            return None, state, {}
        alpha = self.alpha
        h = state.h - alpha * cohort.deltas.sum(dim=0) / context.num_clients
        return -cohort.deltas.mean(dim=0) + h / alpha, FedDynState(h), {"feddyn_h_norm": float(torch.linalg.vector_norm(h))}


@SERVERS.register("feddyn", ServerOptions, client="feddyn", client_options_cls=FedDynOptions,
                  gradient_step=NOT_A_GRADIENT_STEP)
def make_feddyn_server(options: ServerOptions, client: FedDynOptions) -> ComposedServer:
    """FedDyn's server: h <- h - alpha mean_N(delta), x <- mean_S w_i - h/alpha (eta_g = 1 is the paper's)."""
    return server_method(FedDynAggregator(client.alpha), SGDOptimizer(options.learning_rate), options)


register_algorithm("feddyn", client="feddyn", server="feddyn")
