"""FedSpeed's server half (Sun et al., ICLR 2023), built with the ``fedspeed`` solver's options
(:mod:`fedhet.client.fedspeed`): ``client.variant``, ``client.prox_weight`` (``1/lambda``) and
``client.prox_correction`` choose the rule, one option each, read by both halves.

- ``paper``: ``G = (1/|S|) sum_S g_i`` with ``g_i = x - xhat_i`` (Algorithm 1 line 16 for eta_g = 1);
- ``released-code``: FedDyn's rule with ``alpha = 1/lambda`` on the uploaded ``w_K - x``
  (:class:`~fedhet.algorithms.feddyn.FedDynAggregator`; state ``h = (1/N) sum_all ghat_i``).
  Without a prox term (``prox_weight = 0``) or with ``prox_correction = false`` there is no
  correction and it is the plain mean.
"""
from __future__ import annotations

from fedhet.algorithms.feddyn import FedDynAggregator
from fedhet.client.fedspeed import FedSpeedOptions
from fedhet.core.registry import SERVERS, NotAGradientStep, register_algorithm
from fedhet.server.averaging import AverageParticipatingAggregator
from fedhet.server.base import ComposedServer, ServerOptions, SGDOptimizer
from fedhet.server.methods import server_method

NOT_A_GRADIENT_STEP = NotAGradientStep("FedSpeed's released-code variant uses FedDyn's server rule "
                                       "x <- mean_S w_i - lambda h, which is not a gradient step")


def uses_dual(client: FedSpeedOptions) -> bool:
    """Whether the server keeps FedDyn's ``h`` (released-code variant with a prox-correction)."""
    return client.variant == "released-code" and client.prox_weight > 0 and client.prox_correction


def gradient_step(options: ServerOptions, client: FedSpeedOptions) -> bool | NotAGradientStep:
    """The paper's rule is a gradient step; FedDyn's rule (released-code variant with the dual) is not."""
    return NOT_A_GRADIENT_STEP if uses_dual(client) else True


@SERVERS.register("fedspeed", ServerOptions, client="fedspeed", client_options_cls=FedSpeedOptions,
                  gradient_step=gradient_step)
def make_fedspeed_server(options: ServerOptions, client: FedSpeedOptions) -> ComposedServer:
    """FedSpeed's server: x <- x + eta_g mean_S (xhat_i - x) (paper); FedDyn's rule for variant released-code."""
    if uses_dual(client):
        return server_method(FedDynAggregator(client.prox_weight), SGDOptimizer(options.learning_rate), options)
    return server_method(AverageParticipatingAggregator(), SGDOptimizer(options.learning_rate), options)


register_algorithm("fedspeed", client="fedspeed", server="fedspeed")
