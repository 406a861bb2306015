"""FedAvg (McMahan, Moore, Ramage, Hampson, Aguera y Arcas, AISTATS 2017)

Federated averaging (FederatedAveraging, Algorithm 1), with a server learning rate (Reddi et al.,
ICLR 2021). Client i runs ``K_i`` steps of plain local SGD from ``x`` and uploads its model delta::

    w <- w - eta_l (grad f_i(w) + wd w)
    upload delta_i = w_K - x

and the server takes the data-size weighted mean of the pseudo-gradients ``g_i = -delta_i`` and a
plain step (Reddi et al. 2021, Algorithm 1 with ServerOpt = SGD; ``eta_g = 1`` is McMahan's rule)::

    G = sum_{i in S} (n_i / n_S) g_i,      x <- x - eta_g G

The local solver is the solver base itself (:class:`fedhet.client.base.LocalSolver`: clipping,
weight decay and the schedule are shared by every solver), so this module only registers it as
``client.name = "sgd"``; the weighted mean and the SGD step are the shared
:class:`~fedhet.server.averaging.WeightedAverageAggregator` and :class:`~fedhet.server.base.SGDOptimizer`.

Its rules are in docs/algorithms.md sections 2 and 5 (server methods, local solvers).

Rule table server:
    | FedAvg | `G = sum_S p_i g_i` | `x <- x - eta_g G` |

Rule table local:
    | SGD (FedAvg) | `w <- w - eta_l grad f_i(w)` | `delta = w_K - x` |
"""
from __future__ import annotations

from fedhet.client.base import ClientOptions, LocalSolver
from fedhet.core.registry import CLIENT_SOLVERS, SERVERS, register_algorithm
from fedhet.server.averaging import WeightedAverageAggregator
from fedhet.server.base import ComposedServer, ServerOptions, SGDOptimizer
from fedhet.server.methods import server_method


@CLIENT_SOLVERS.register("sgd", ClientOptions)
def make_sgd(options: ClientOptions) -> LocalSolver:
    """Local SGD: w <- w - eta_l (grad f_i(w) + wd w); upload w_K - x."""
    return LocalSolver(options)


@SERVERS.register("fedavg", ServerOptions, gradient_step=True)
def make_fedavg(options: ServerOptions) -> ComposedServer:
    """FedAvg: G = sum_S (n_i / n_S) g_i;  x <- x - eta_g G."""
    return server_method(WeightedAverageAggregator(), SGDOptimizer(options.learning_rate), options)


register_algorithm("fedavg", client="sgd", server="fedavg")
