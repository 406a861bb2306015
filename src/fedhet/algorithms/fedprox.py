"""FedProx (Li, Sahu, Zaheer, Sanjabi, Talwalkar, Smith, MLSys 2020)

A local solver. Each client approximately minimises the proximal objective of the paper's Eq. (2),
``h_i(w; x) = f_i(w) + (mu/2) ||w - x||^2``, with local SGD (Algorithm 2), so the step is::

    w <- w - eta_l (grad f_i(w) + mu (w - x))
    upload delta_i = w_K - x

and the server is FedAvg's (docs/algorithms.md section 5). FedProx has no server rule of its own, so it
is selected as ``client.name = "fedprox"`` with any server method. Its FedNova step count ``a_i`` is
the shared :func:`~fedhet.client.proximal.prox_effective_steps`.

Rule table local:
    | FedProx (Li 2020) | gradient `+ mu (w - x)` (squared prox) | as SGD |
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch

from fedhet.client.base import ClientOptions, GradFn, LocalSolver
from fedhet.client.proximal import prox_effective_steps
from fedhet.core.options import option
from fedhet.core.registry import CLIENT_SOLVERS


@dataclasses.dataclass(frozen=True)
class FedProxOptions(ClientOptions):
    """``[client]`` options of ``fedprox``."""

    mu: float = option(0.01, ge=0, symbol="mu",
                       help="proximal weight: local objective f_i(w) + (mu/2)||w - x||^2 (0 = plain local SGD)")


class FedProxSolver(LocalSolver):
    """Local SGD on ``f_i(w) + (mu/2)||w - x||^2``: ``direction = grad f_i(w) + mu (w - x)``."""

    keeps_gradient = False      # the gradient is read once, in the step (client.base.GradFn)
    lockstep_knobs = ("mu",)     # read only arithmetically: a per-row column in lockstep runs

    def __init__(self, options: FedProxOptions):
        super().__init__(options)
        self.mu = options.mu

    def direction(self, w: torch.Tensor, x: torch.Tensor, grad_fn: GradFn,
                  local: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        loss, grad = self.gradient(w, grad_fn)
        # The prox gradient is written out analytically (not built by autograd on detached
        # tensors, the bug that turns some released FedProx/FedDyn code into plain SGD).
        return loss, grad + self.mu * (w - x)

    def segment_direction(self, grad: torch.Tensor, w: torch.Tensor, x: torch.Tensor, local: dict[str, Any],
                          part: slice) -> torch.Tensor:
        return super().segment_direction(grad, w, x, local, part) + self.mu * (w - x[part])

    def effective_steps(self, num_steps: torch.Tensor, learning_rate: float) -> torch.Tensor:
        return prox_effective_steps(num_steps, learning_rate, self.mu)


@CLIENT_SOLVERS.register("fedprox", FedProxOptions)
def make_fedprox(options: FedProxOptions) -> LocalSolver:
    """FedProx: w <- w - eta_l (grad f_i(w) + mu (w - x)); upload w_K - x (Li et al. 2020)."""
    return FedProxSolver(options)
