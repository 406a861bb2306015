"""FedSAM (Qu, Li, Duan, Liu, Tang, Lu, ICML 2022)

Local sharpness-aware minimisation ("Generalized federated learning via sharpness aware
minimization"; also Caldarola, Caputo, Ciccone, ECCV 2022). Each local step takes the minibatch
gradient at the SAM-perturbed point (Foret et al., ICLR 2021)::

    g = grad f_i(w; b)
    g_sam = grad f_i(w + rho g / ||g||; b)            (same minibatch b)
    w <- w - eta_l (clip(g_sam) + wd w)

and uploads ``w_K - x`` (any server; FedAvg's in the papers). ``rho = 0`` evaluates the second
gradient at ``w`` itself, so FedSAM with ``rho = 0`` is exactly local SGD (at twice the cost).
The reported loss is the minibatch loss at ``w``. ``||g||`` is guarded by 1e-12 so a zero gradient
gives no perturbation instead of NaN (the shared :func:`~fedhet.client.sharpness.ascent_point`).

Its rule is in docs/algorithms.md section 5 (local solvers).

Rule table local:
    | FedSAM | gradient at `w + rho grad/||grad||` | as SGD |
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch

from fedhet.client.base import ClientOptions, GradFn, LocalSolver
from fedhet.client.sharpness import ascent_point
from fedhet.core.options import option
from fedhet.core.registry import CLIENT_SOLVERS


@dataclasses.dataclass(frozen=True)
class FedSAMOptions(ClientOptions):
    """``[client]`` options of ``fedsam``."""

    rho: float = option(0.05, ge=0, symbol="rho",
                        help="SAM radius: gradient taken at w + rho g/||g|| (0 = plain local SGD)")


class FedSAMSolver(LocalSolver):
    """Local SAM steps; see the module docstring."""

    keeps_gradient = False      # each gradient is used before the next call (client.base.GradFn)
    lockstep_knobs = ("rho",)     # read only arithmetically: a per-row column in lockstep runs

    def __init__(self, options: FedSAMOptions):
        super().__init__(options)
        self.rho = options.rho

    def direction(self, w: torch.Tensor, x: torch.Tensor, grad_fn: GradFn,
                  local: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        loss, grad = grad_fn(w)
        # ascent_point returns a new tensor, so the shared gradient buffer may be overwritten next.
        perturbed = ascent_point(w, grad, self.rho)
        _, sam_grad = grad_fn(perturbed)
        sam_grad = self.regularize(sam_grad, w)
        return loss, sam_grad


@CLIENT_SOLVERS.register("fedsam", FedSAMOptions)
def make_fedsam(options: FedSAMOptions) -> LocalSolver:
    """FedSAM: the local gradient is taken at w + rho g/||g|| (Qu et al. 2022; Caldarola et al. 2022)."""
    return FedSAMSolver(options)
