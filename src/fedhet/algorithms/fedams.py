"""FedAMS and FedAMSGrad (Wang, Lin, Chen, ICML 2022)

"Communication-Efficient Adaptive Federated Learning", Algorithm 2: FedAvg's aggregate
``G = sum_S p_i g_i`` (data-size weights, docs/algorithms.md section 1) turned into an AMSGrad step
whose second moment never decreases::

    m <- b1 m + (1 - b1) G,     v <- b2 v + (1 - b2) G^2,     m_0 = v_0 = 0
    FedAMS:     vhat <- max(vhat, v, eps),   x <- x - eta_g m / sqrt(vhat),            vhat_0 = eps
    FedAMSGrad: vhat <- max(vhat, v),        x <- x - eta_g m / (sqrt(vhat) + eps),    vhat_0 = 0

Bias correction (``bias_correction = true``; off by default, as in the paper's pseudo-code) is
``torch.optim.Adam``'s (:mod:`fedhet.server.bias_correction`), ``t`` the steps taken so far::

    FedAMSGrad: x <- x - (eta_g / (1 - b1^t)) m / (sqrt(vhat / (1 - b2^t)) + eps)   (= torch.optim.Adam(amsgrad=True))
    FedAMS:     x <- x - (eta_g / (1 - b1^t)) m / sqrt(vhat / (1 - b2^t))           (its eps floor sits inside vhat)

A round in which nobody trained applies no step and leaves the state unchanged
(:class:`~fedhet.server.base.ComposedServer`). All state tensors have the model's dtype and device;
the step count is an ``int``.

Rule table server:
    | FedAMS (Wang, Lin, Chen 2022) | as FedAvg | Adam moments, `vhat <- max(vhat, v, eps)`, `x <- x - eta_g m / sqrt(vhat)`; FedAMSGrad variant `vhat <- max(vhat, v)`, step `m / (sqrt(vhat) + eps)` |
"""
from __future__ import annotations

import abc
import dataclasses
from typing import NamedTuple

import torch

from fedhet.core.options import option
from fedhet.core.registry import SERVERS
from fedhet.server.averaging import WeightedAverageAggregator
from fedhet.server.base import ServerOptions
from fedhet.server.bias_correction import bias_corrections
from fedhet.server.methods import server_method


@dataclasses.dataclass(frozen=True)
class AMSOptions(ServerOptions):
    """``[server]`` options of ``fedams`` and ``fedamsgrad`` (Wang, Lin, Chen 2022)."""

    learning_rate: float = option(0.01, gt=0, symbol="eta", help="server (global) learning rate")
    beta1: float = option(0.9, ge=0, lt=1, symbol="beta_1", help="first-moment decay: m <- b1 m + (1-b1) G")
    beta2: float = option(0.99, ge=0, lt=1, symbol="beta_2", help="second-moment decay: v <- b2 v + (1-b2) G^2")
    # Not a paper default: the FedAWARE grid searches eps in 1e-8 .. 1e-1; 1e-3 equals Reddi's tau.
    eps: float = option(1e-3, gt=0, symbol="epsilon",
                        help="FedAMS: floor of vhat (vhat <- max(vhat, v, eps)); FedAMSGrad: added to sqrt(vhat)")
    bias_correction: bool = option(False, help="divide m by (1-b1^t) and vhat by (1-b2^t) as torch.optim.Adam "
                                               "(off in the paper's pseudo-code)")


class AMSState(NamedTuple):
    """FedAMS / FedAMSGrad's state."""

    step: int
    first_moment: torch.Tensor
    second_moment: torch.Tensor
    max_second_moment: torch.Tensor


class AMSOptimizer(abc.ABC):
    """FedAMS / FedAMSGrad server step (module docstring); subclasses place ``eps``.

    State: ``step`` (int), ``first_moment`` m, ``second_moment`` v, ``max_second_moment`` vhat.
    """

    def __init__(self, *, learning_rate: float, beta1: float, beta2: float, eps: float, bias_correction: bool):
        self.learning_rate = learning_rate
        self.beta1, self.beta2, self.eps = beta1, beta2, eps
        self.bias_correction = bias_correction

    @classmethod
    def from_options(cls, options: AMSOptions) -> "AMSOptimizer":
        return cls(learning_rate=options.learning_rate, beta1=options.beta1, beta2=options.beta2, eps=options.eps,
                   bias_correction=options.bias_correction)

    @abc.abstractmethod
    def initial_max(self) -> float:
        """``vhat_0``."""

    def bound(self, max_second: torch.Tensor) -> torch.Tensor:
        """``vhat`` after ``max(vhat, v)``."""
        return max_second

    def denominator(self, root: torch.Tensor) -> torch.Tensor:
        """The step's divisor from ``sqrt(vhat / (1 - b2^t))``."""
        return root

    def init(self, params: torch.Tensor) -> AMSState:
        return AMSState(step=0, first_moment=torch.zeros_like(params), second_moment=torch.zeros_like(params),
                        max_second_moment=torch.full_like(params, self.initial_max()))

    def update(self, state, pseudo_gradient, context):
        step = state.step + 1
        first = self.beta1 * state.first_moment + (1 - self.beta1) * pseudo_gradient
        second = self.beta2 * state.second_moment + (1 - self.beta2) * pseudo_gradient * pseudo_gradient
        max_second = self.bound(torch.maximum(state.max_second_moment, second))
        correction1, correction2 = bias_corrections(self.beta1, self.beta2, step, self.bias_correction)
        denominator = self.denominator((max_second / correction2).sqrt())
        update = (self.learning_rate / correction1) * first / denominator
        return update, AMSState(step, first, second, max_second)


class FedAMSOptimizer(AMSOptimizer):
    """FedAMS: ``vhat <- max(vhat, v, eps)`` (``vhat_0 = eps``), ``u = eta m / sqrt(vhat)``."""

    def initial_max(self) -> float:
        return self.eps

    def bound(self, max_second):
        return max_second.clamp(min=self.eps)


class FedAMSGradOptimizer(AMSOptimizer):
    """FedAMSGrad: ``vhat <- max(vhat, v)`` (``vhat_0 = 0``), ``u = eta m / (sqrt(vhat) + eps)``."""

    def initial_max(self) -> float:
        return 0.0

    def denominator(self, root):
        return root + self.eps


@SERVERS.register("fedams", AMSOptions, gradient_step=True)
def make_fedams(options: AMSOptions):
    """FedAMS: Adam moments; vhat <- max(vhat, v, eps); x <- x - eta m/sqrt(vhat) (Wang, Lin, Chen 2022)."""
    return server_method(WeightedAverageAggregator(), FedAMSOptimizer.from_options(options), options)


@SERVERS.register("fedamsgrad", AMSOptions, gradient_step=True)
def make_fedamsgrad(options: AMSOptions):
    """FedAMSGrad: Adam moments; vhat <- max(vhat, v); x <- x - eta m/(sqrt(vhat)+eps) (Wang, Lin, Chen 2022)."""
    return server_method(WeightedAverageAggregator(), FedAMSGradOptimizer.from_options(options), options)
