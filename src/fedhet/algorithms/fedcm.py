"""FedCM (Xu, Wang, Wang, Yang, Yu, Zhang, arXiv 2021)

Federated learning with client-level momentum, arXiv:2106.10874, Algorithm 1. Every client steps
along a mix of its own gradient and the server's previous average update::

    direction = alpha grad f_i(w) + (1 - alpha) Delta
    upload delta_i = w_K - x                                   (any server; FedAvg's in the paper)

``Delta`` is server-side state the clients need, so the server method owns it
(:class:`ServerMomentumPerStep`, the solver's ``server_stage``; docs/design.md "Server-side state")
and broadcasts it: the server's last average update
per local step, ``Delta <- -(1/|S|) sum_{i in S} delta_i / (K_i eta_l)`` after each round with
participants (zero before the first round). The paper writes ``-(mean_S delta)/(K eta_l)`` with one
``K`` for everyone; dividing each client's delta by its own ``K_i`` is the same when the step counts
are equal and stays a per-step quantity under system heterogeneity. Each client computes its
``delta_i / (K_i eta_l)`` itself (it knows its ``K_i`` and this round's ``eta_l``) and uploads it as
the cohort extra ``update_per_step``.

Its rule is in docs/algorithms.md section 5 (local solvers).

Rule table local:
    | FedCM (Xu 2021) | direction `alpha grad f_i(w) + (1 - alpha) Delta`, where `Delta` is the server's
        previous average update per local step, `-(mean_S delta)/(K eta_l)` (zero in round 0) | as SGD; alpha = 0.1 |
"""
from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import torch

from fedhet.client.base import ClientOptions, GradFn, LocalSolver, per_client
from fedhet.core.cohort import Cohort
from fedhet.core.options import option
from fedhet.core.registry import CLIENT_SOLVERS

UPDATE_PER_STEP = "update_per_step"


@dataclasses.dataclass(frozen=True)
class FedCMOptions(ClientOptions):
    """``[client]`` options of ``fedcm``."""

    alpha: float = option(0.1, gt=0, le=1, symbol="alpha",
                          help="weight of the client's own gradient: direction = alpha grad + (1 - alpha) Delta (1 = plain SGD)")


class ServerMomentumState(NamedTuple):
    """:class:`ServerMomentumPerStep`'s state: FedCM's ``Delta``."""

    momentum: torch.Tensor


class FedCMSolver(LocalSolver):
    """FedCM's client: ``direction = alpha grad f_i(w) + (1 - alpha) Delta``; see the module docstring."""

    keeps_gradient = False      # the gradient is read once, in the step (client.base.GradFn)
    lockstep_knobs = ("alpha",)     # read only arithmetically: a per-row column in lockstep runs
    # On a wire only delta_i travels: update_per_step = delta_i / (K_i eta_l) is delta_i scaled by two
    # numbers the server knows, so the clock counts one uploaded vector (docs/system.md, "Bytes").
    uploaded_vectors = 1

    def __init__(self, options: FedCMOptions):
        super().__init__(options)
        self.alpha = options.alpha

    def server_stage(self) -> "ServerMomentumPerStep":
        return ServerMomentumPerStep()

    def begin(self, x, client_state, broadcast, learning_rate, context=None) -> dict[str, Any]:
        # (1 - alpha) Delta is constant during local training: form it once.
        return {"momentum_term": (1 - self.alpha) * broadcast["momentum"]}

    def direction(self, w: torch.Tensor, x: torch.Tensor, grad_fn: GradFn,
                  local: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        loss, grad = self.gradient(w, grad_fn)
        return loss, self.alpha * grad + local["momentum_term"]

    def segment_direction(self, grad: torch.Tensor, w: torch.Tensor, x: torch.Tensor, local: dict[str, Any],
                          part: slice) -> torch.Tensor:
        return self.alpha * super().segment_direction(grad, w, x, local, part) + local["momentum_term"][part]

    def finish(self, x, w, local, client_state, num_steps, learning_rate):
        delta = w - x
        return delta, client_state, {UPDATE_PER_STEP: delta / (per_client(num_steps, w) * learning_rate)}


class ServerMomentumPerStep:
    """FedCM's ``Delta`` (a :class:`~fedhet.server.base.ServerStage`): zero at first,
    ``Delta <- -mean_S delta_i / (K_i eta_l)`` after each round with participants; broadcast as
    ``momentum``."""

    def init(self, params: torch.Tensor, context: Any) -> ServerMomentumState:
        return ServerMomentumState(torch.zeros_like(params))

    def update(self, state: ServerMomentumState, cohort: Cohort, context: Any,
               params: torch.Tensor) -> ServerMomentumState:
        if len(cohort) == 0:
            return state
        return ServerMomentumState(-cohort.extras[UPDATE_PER_STEP].mean(dim=0).to(params.dtype))

    def broadcast(self, state: ServerMomentumState) -> dict[str, torch.Tensor]:
        return {"momentum": state.momentum}


@CLIENT_SOLVERS.register("fedcm", FedCMOptions)
def make_fedcm(options: FedCMOptions) -> LocalSolver:
    """FedCM: alpha grad + (1 - alpha) Delta, Delta = server's last mean update per local step (Xu et al. 2021)."""
    return FedCMSolver(options)
