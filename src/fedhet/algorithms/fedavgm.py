"""FedAvgM (Hsu, Qi, Brown, arXiv 2019)

"Measuring the Effects of Non-Identical Data Distribution for Federated Visual Classification":
FedAvg's aggregate ``G = sum_S p_i g_i`` (data-size weights ``p_i = n_i / n_S``, docs/algorithms.md
section 1) driven through heavy-ball server momentum::

    v <- beta v + G,      x <- x - eta_g v,      v_0 = 0

which is ``torch.optim.SGD(momentum=beta, dampening=0)`` on the same sequence of ``G``; ``beta = 0``
is FedAvg. A round in which nobody trained applies no step and leaves ``v`` unchanged
(:class:`~fedhet.server.base.ComposedServer`).

Rule table server:
    | FedAvgM (Hsu 2019) | as FedAvg | heavy-ball `v <- beta v + G`, `x <- x - eta_g v` (`beta` in {0.7,0.9,0.97,0.997}) |
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch

from fedhet.core.options import option
from fedhet.core.registry import SERVERS
from fedhet.server.averaging import WeightedAverageAggregator
from fedhet.server.base import ServerOptions
from fedhet.server.methods import server_method


@dataclasses.dataclass(frozen=True)
class FedAvgMOptions(ServerOptions):
    """``[server]`` options of ``fedavgm`` (Hsu et al. 2019)."""

    momentum: float = option(0.9, ge=0, lt=1, symbol="beta",
                             help="server heavy-ball momentum: v <- beta v + G (0 gives FedAvg); "
                                  "the FedAWARE grid is 0.7, 0.9, 0.97, 0.997")


class MomentumState(NamedTuple):
    """FedAvgM's state: the heavy-ball velocity ``v``."""

    velocity: torch.Tensor


class MomentumOptimizer:
    """Heavy-ball server momentum: ``v <- beta v + G``, ``u = eta_g v`` (module docstring)."""

    def __init__(self, learning_rate: float, momentum: float):
        self.learning_rate = learning_rate
        self.momentum = momentum

    def init(self, params: torch.Tensor) -> MomentumState:
        return MomentumState(velocity=torch.zeros_like(params))

    def update(self, state, pseudo_gradient, context):
        velocity = self.momentum * state.velocity + pseudo_gradient
        return self.learning_rate * velocity, MomentumState(velocity)


@SERVERS.register("fedavgm", FedAvgMOptions, gradient_step=True)
def make_fedavgm(options: FedAvgMOptions):
    """FedAvgM: G = sum_S p_i g_i; v <- beta v + G; x <- x - eta_g v (Hsu et al. 2019)."""
    optimizer = MomentumOptimizer(options.learning_rate, options.momentum)
    return server_method(WeightedAverageAggregator(), optimizer, options)
