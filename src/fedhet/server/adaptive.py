"""Server momentum and adaptive server optimisers: FedAvgM, FedAdagrad, FedAdam, FedYogi, FedAMS, FedAMSGrad.

Each is "FedAvg aggregation + a server optimiser": ``G = sum_S p_i g_i`` (data-size weights), then
the optimiser below turns ``G`` into the step ``u`` and ``x <- x - u`` (docs/algorithms.md sections 1, 2).
Rounds in which nobody trained apply no step and leave the optimiser state unchanged
(:class:`~fedhet.server.base.ComposedServer`).

- FedAvgM (Hsu, Qi, Brown 2019), heavy ball::

      v <- beta v + G,      u = eta_g v

  ``torch.optim.SGD(momentum=beta, dampening=0)`` on the same sequence of ``G`` (v_0 = 0).

- FedAdagrad / FedAdam / FedYogi (Reddi et al., "Adaptive Federated Optimization", ICLR 2021,
  Algorithm 2)::

      m <- b1 m + (1 - b1) G
      Adagrad: v <- v + G^2
      Adam:    v <- b2 v + (1 - b2) G^2
      Yogi:    v <- v - (1 - b2) G^2 sign(v - G^2)
      u = eta_g m / (sqrt(v) + tau),       m_0 = 0, v_0 = tau^2

- FedAMS and FedAMSGrad (Wang, Lin, Chen, "Communication-Efficient Adaptive Federated Learning",
  ICML 2022, Algorithm 2)::

      m <- b1 m + (1 - b1) G,     v <- b2 v + (1 - b2) G^2,     m_0 = v_0 = 0
      FedAMS:     vhat <- max(vhat, v, eps),   u = eta_g m / sqrt(vhat)
      FedAMSGrad: vhat <- max(vhat, v),        u = eta_g m / (sqrt(vhat) + eps),    vhat_0 = 0

Bias correction (``bias_correction = true``; off by default, as in the papers' pseudo-code) is
defined exactly as ``torch.optim.Adam`` does it, with ``t`` the number of steps taken so far
(including this one)::

      u = (eta_g / (1 - b1^t)) m / (sqrt(vbar / (1 - b2^t)) + tau)

where ``vbar`` is ``v`` (Adam, Yogi) or ``vhat`` (FedAMSGrad = ``torch.optim.Adam(amsgrad=True)``);
FedAMS divides by ``sqrt(vhat / (1 - b2^t))`` (its ``eps`` floor sits inside ``vhat``); FedAdagrad's
``v`` is a sum, not an average, so only ``m`` is corrected. With ``b1 = 0`` FedAdagrad is
``torch.optim.Adagrad(initial_accumulator_value=tau^2, eps=tau)``.

All state tensors have the model's dtype and device; the step count is an ``int``.

Rule table server:
    | FedAvgM (Hsu 2019) | as FedAvg |
        heavy-ball `v <- beta v + G`, `x <- x - eta_g v` (`beta` in {0.7,0.9,0.97,0.997}) |
    | FedAdagrad / FedAdam / FedYogi (Reddi 2021) | as FedAvg | `m <- b1 m + (1-b1) G`; Adagrad `v <- v + G^2`;
        Adam `v <- b2 v + (1-b2) G^2`; Yogi `v <- v - (1-b2) G^2 sign(v - G^2)`; `x <- x - eta_g m / (sqrt(v) + tau)`;
        `v_0 = tau^2`; no bias correction by default (flag) |
    | FedAMS (Wang, Lin, Chen 2022) | as FedAvg | Adam moments, `vhat <- max(vhat, v, eps)`,
        `x <- x - eta_g m / sqrt(vhat)`; FedAMSGrad variant `vhat <- max(vhat, v)`, step `m / (sqrt(vhat) + eps)` |
"""
from __future__ import annotations

import abc
import dataclasses
from typing import NamedTuple

import torch

from fedhet.core.options import option
from fedhet.core.registry import SERVERS
from fedhet.server.base import ServerOptions, WeightedAverage
from fedhet.server.methods import server_method



# --- options ------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class FedAvgMOptions(ServerOptions):
    """``[server]`` options of ``fedavgm`` (Hsu et al. 2019)."""

    momentum: float = option(0.9, ge=0, lt=1, symbol="beta",
                             help="server heavy-ball momentum: v <- beta v + G (0 gives FedAvg); "
                                  "the FedAWARE grid is 0.7, 0.9, 0.97, 0.997")


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


# --- server optimisers ----------------------------------------------------------------------------

class MomentumState(NamedTuple):
    """FedAvgM's state: the heavy-ball velocity ``v``."""

    velocity: torch.Tensor


class AdaptiveState(NamedTuple):
    """FedAdagrad / FedAdam / FedYogi's state."""

    step: int
    first_moment: torch.Tensor
    second_moment: torch.Tensor


class AMSState(NamedTuple):
    """FedAMS / FedAMSGrad's state."""

    step: int
    first_moment: torch.Tensor
    second_moment: torch.Tensor
    max_second_moment: torch.Tensor


class ServerMomentum:
    """Heavy-ball server momentum: ``v <- beta v + G``, ``u = eta_g v`` (FedAvgM, Hsu et al. 2019)."""

    def __init__(self, learning_rate: float, momentum: float):
        self.learning_rate = learning_rate
        self.momentum = momentum

    def init(self, params: torch.Tensor) -> MomentumState:
        return MomentumState(velocity=torch.zeros_like(params))

    def update(self, state, pseudo_gradient, context):
        velocity = self.momentum * state.velocity + pseudo_gradient
        return self.learning_rate * velocity, MomentumState(velocity)


def _bias_corrections(beta1: float, beta2: float, step: int, enabled: bool) -> tuple[float, float]:
    """``(1 - b1^t, 1 - b2^t)`` when bias correction is on, else ``(1, 1)``."""
    if not enabled:
        return 1.0, 1.0
    return 1.0 - beta1 ** step, 1.0 - beta2 ** step


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
        correction1, correction2 = _bias_corrections(self.beta1, self.beta2, step, self.bias_correction)
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


class AMSOptimizer(abc.ABC):
    """FedAMS / FedAMSGrad server step (Wang, Lin, Chen 2022; module docstring); subclasses place ``eps``.

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
        correction1, correction2 = _bias_corrections(self.beta1, self.beta2, step, self.bias_correction)
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


# --- named server methods -------------------------------------------------------------------------

@SERVERS.register("fedavgm", FedAvgMOptions)
def make_fedavgm(options: FedAvgMOptions):
    """FedAvgM: G = sum_S p_i g_i; v <- beta v + G; x <- x - eta_g v (Hsu et al. 2019)."""
    return server_method(WeightedAverage(), ServerMomentum(options.learning_rate, options.momentum), options)


@SERVERS.register("fedadagrad", AdaptiveOptions)
def make_fedadagrad(options: AdaptiveOptions):
    """FedAdagrad: m <- b1 m + (1-b1) G; v <- v + G^2; x <- x - eta_g m/(sqrt(v)+tau) (Reddi et al. 2021)."""
    return server_method(WeightedAverage(), AdagradOptimizer.from_options(options), options)


@SERVERS.register("fedadam", AdaptiveOptions)
def make_fedadam(options: AdaptiveOptions):
    """FedAdam: m <- b1 m + (1-b1) G; v <- b2 v + (1-b2) G^2; x <- x - eta_g m/(sqrt(v)+tau) (Reddi et al. 2021)."""
    return server_method(WeightedAverage(), AdamOptimizer.from_options(options), options)


@SERVERS.register("fedyogi", AdaptiveOptions)
def make_fedyogi(options: AdaptiveOptions):
    """FedYogi: v <- v - (1-b2) G^2 sign(v - G^2); x <- x - eta_g m/(sqrt(v)+tau) (Reddi et al. 2021)."""
    return server_method(WeightedAverage(), YogiOptimizer.from_options(options), options)


@SERVERS.register("fedams", AMSOptions)
def make_fedams(options: AMSOptions):
    """FedAMS: Adam moments; vhat <- max(vhat, v, eps); x <- x - eta m/sqrt(vhat) (Wang, Lin, Chen 2022)."""
    return server_method(WeightedAverage(), FedAMSOptimizer.from_options(options), options)


@SERVERS.register("fedamsgrad", AMSOptions)
def make_fedamsgrad(options: AMSOptions):
    """FedAMSGrad: Adam moments; vhat <- max(vhat, v); x <- x - eta m/(sqrt(vhat)+eps) (Wang, Lin, Chen 2022)."""
    return server_method(WeightedAverage(), FedAMSGradOptimizer.from_options(options), options)
