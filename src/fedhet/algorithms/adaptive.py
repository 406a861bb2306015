"""FedAdagrad, FedAdam, FedYogi (Reddi, Charles, Zaheer, Garrett, Rush, Konecny, Kumar, McMahan, ICLR 2021)

"Adaptive Federated Optimization", Algorithm 2: FedAvg's aggregate ``G = sum_S p_i g_i``
(data-size weights, docs/algorithms.md section 1) turned into a per-coordinate adaptive step::

    m <- b1 m + (1 - b1) G
    Adagrad: v <- v + G^2
    Adam:    v <- b2 v + (1 - b2) G^2
    Yogi:    v <- v - (1 - b2) G^2 sign(v - G^2)
    x <- x - eta_g m / (sqrt(v) + tau),       m_0 = 0, v_0 = tau^2

Bias correction (``bias_correction = true``; off by default, as in the paper's pseudo-code) is
defined exactly as ``torch.optim.Adam`` does it (:mod:`fedhet.server.bias_correction`), with ``t``
the number of steps taken so far (including this one)::

    x <- x - (eta_g / (1 - b1^t)) m / (sqrt(v / (1 - b2^t)) + tau)

FedAdagrad's ``v`` is a sum, not an average, so only ``m`` is corrected; with ``b1 = 0`` FedAdagrad
is ``torch.optim.Adagrad(initial_accumulator_value=tau^2, eps=tau)``. A round in which nobody
trained applies no step and leaves the state unchanged (:class:`~fedhet.server.base.ComposedServer`).
All state tensors have the model's dtype and device; the step count is an ``int``.

Rule table server:
    | FedAdagrad / FedAdam / FedYogi (Reddi 2021) | as FedAvg | `m <- b1 m + (1-b1) G`; Adagrad `v <- v + G^2`; Adam `v <- b2 v + (1-b2) G^2`; Yogi `v <- v - (1-b2) G^2 sign(v - G^2)`; `x <- x - eta_g m / (sqrt(v) + tau)`; `v_0 = tau^2`; no bias correction by default (flag) |
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
class AdaptiveOptions(ServerOptions):
    """``[server]`` options of ``fedadagrad``, ``fedadam`` and ``fedyogi`` (Reddi et al. 2021)."""

    # Adaptive steps are normalised per coordinate: eta_g = 1 (FedAvg's default) would move every
    # coordinate by about 1 per round. Reddi et al. tune eta_g on a grid; 1e-2 is a safe start.
    learning_rate: float = option(0.01, gt=0, symbol="eta_g", help="server (global) learning rate")
    beta1: float = option(0.9, ge=0, lt=1, symbol="beta_1", help="first-moment decay: m <- b1 m + (1-b1) G")
    beta2: float = option(0.99, ge=0, lt=1, symbol="beta_2",
                          help="second-moment decay (Adam, Yogi; unused by Adagrad)")
    tau: float = option(1e-3, gt=0, symbol="tau",
                        help="adaptivity: added to sqrt(v) in the step, and v_0 = tau^2")
    bias_correction: bool = option(False, help="divide m by (1-b1^t) and v by (1-b2^t) as torch.optim.Adam "
                                               "(off in the paper's pseudo-code)")


class AdaptiveState(NamedTuple):
    """FedAdagrad / FedAdam / FedYogi's state."""

    step: int
    first_moment: torch.Tensor
    second_moment: torch.Tensor


class AdaptiveOptimizer(abc.ABC):
    """Reddi et al.'s adaptive server step (module docstring); subclasses give the second-moment rule.

    State: ``step`` (int), ``first_moment`` m, ``second_moment`` v (``v_0 = tau^2``).
    """

    # Whether v is an exponential average, so bias correction divides it by (1 - b2^t).
    averages_second_moment = True

    def __init__(self, *, learning_rate: float, beta1: float, beta2: float, tau: float, bias_correction: bool):
        self.learning_rate = learning_rate
        self.beta1, self.beta2, self.tau = beta1, beta2, tau
        self.bias_correction = bias_correction

    @classmethod
    def from_options(cls, options: AdaptiveOptions) -> "AdaptiveOptimizer":
        return cls(learning_rate=options.learning_rate, beta1=options.beta1, beta2=options.beta2, tau=options.tau,
                   bias_correction=options.bias_correction)

    @abc.abstractmethod
    def second_moment(self, second: torch.Tensor, grad_sq: torch.Tensor) -> torch.Tensor:
        """The new ``v`` from the old ``v`` and ``G^2``."""

    def init(self, params: torch.Tensor) -> AdaptiveState:
        return AdaptiveState(step=0, first_moment=torch.zeros_like(params),
                             second_moment=torch.full_like(params, self.tau ** 2))

    def update(self, state, pseudo_gradient, context):
        step = state.step + 1
        grad_sq = pseudo_gradient * pseudo_gradient
        first = self.beta1 * state.first_moment + (1 - self.beta1) * pseudo_gradient
        second = self.second_moment(state.second_moment, grad_sq)
        correction1, correction2 = bias_corrections(self.beta1, self.beta2, step, self.bias_correction)
        if not self.averages_second_moment:
            correction2 = 1.0
        denominator = (second / correction2).sqrt() + self.tau
        update = (self.learning_rate / correction1) * first / denominator
        return update, AdaptiveState(step, first, second)


class AdagradOptimizer(AdaptiveOptimizer):
    """FedAdagrad: ``v <- v + G^2`` (a running sum: only ``m`` is bias-corrected)."""

    averages_second_moment = False

    def second_moment(self, second, grad_sq):
        return second + grad_sq


class AdamOptimizer(AdaptiveOptimizer):
    """FedAdam: ``v <- b2 v + (1 - b2) G^2``."""

    def second_moment(self, second, grad_sq):
        return self.beta2 * second + (1 - self.beta2) * grad_sq


class YogiOptimizer(AdaptiveOptimizer):
    """FedYogi: ``v <- v - (1 - b2) G^2 sign(v - G^2)``, an additive, sign-controlled change of v
    (Zaheer et al. 2018)."""

    def second_moment(self, second, grad_sq):
        return second - (1 - self.beta2) * grad_sq * torch.sign(second - grad_sq)


@SERVERS.register("fedadagrad", AdaptiveOptions, gradient_step=True)
def make_fedadagrad(options: AdaptiveOptions):
    """FedAdagrad: m <- b1 m + (1-b1) G; v <- v + G^2; x <- x - eta_g m/(sqrt(v)+tau) (Reddi et al. 2021)."""
    return server_method(WeightedAverageAggregator(), AdagradOptimizer.from_options(options), options)


@SERVERS.register("fedadam", AdaptiveOptions, gradient_step=True)
def make_fedadam(options: AdaptiveOptions):
    """FedAdam: m <- b1 m + (1-b1) G; v <- b2 v + (1-b2) G^2; x <- x - eta_g m/(sqrt(v)+tau) (Reddi et al. 2021)."""
    return server_method(WeightedAverageAggregator(), AdamOptimizer.from_options(options), options)


@SERVERS.register("fedyogi", AdaptiveOptions, gradient_step=True)
def make_fedyogi(options: AdaptiveOptions):
    """FedYogi: v <- v - (1-b2) G^2 sign(v - G^2); x <- x - eta_g m/(sqrt(v)+tau) (Reddi et al. 2021)."""
    return server_method(WeightedAverageAggregator(), YogiOptimizer.from_options(options), options)
