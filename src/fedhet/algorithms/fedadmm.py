"""FedADMM (Wang, Marella, Anderson, CDC 2022)

A federated primal-dual algorithm allowing partial participation (IEEE CDC 2022, arXiv:2203.15104),
Algorithm 1. Client i keeps a dual variable ``y_i`` (zero at first) and approximately minimises the
augmented Lagrangian by K_i local SGD steps from ``x``::

    f_i(w) + <y_i, w - x> + (rho/2) ||w - x||^2
    direction = grad f_i(w) + y_i + rho (w - x)
    after training: y_i <- y_i + rho (w_K - x)
    report change_i = theta_i+ - theta_i,     theta_i = w_i + y_i / rho

Server: ``x <- x + (eta_g / N) sum_{i in S} change_i`` (server method ``fedadmm``: the sum over this
round's clients divided by all N, the shared ``AverageAllAggregator``, and the server SGD step),
which keeps ``x = (1/N) sum_i theta_i`` over all clients when ``eta_g = 1``.

``theta_i`` before a client's first participation is ``x^0`` (``w_i = x^0``, ``y_i = 0``). The engine's
per-client stores start at zero, so the store keeps ``theta_i - x^0`` (``anchor_offset``) and the
server method keeps ``x^0`` and broadcasts it (:class:`InitialParams`, the solver's ``server_stage``).
The uploaded "delta" is ``change_i`` (the effective delta, not ``w_K - x``).

Its rule is in docs/algorithms.md section 5 (local solvers).

Rule table local:
    | FedADMM (Wang, Marella, Anderson 2022) | minimise `f_i(w) + <y_i, w - x> + (rho/2)||w - x||^2` |
        `y_i <- y_i + rho (w_K - x)`; client reports the change of `w_i + y_i/rho` since its last participation;
        server `x <- x + (eta_g/N) sum_S change_i` |
"""
from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import torch

from fedhet.client.base import ClientOptions, GradFn, LocalSolver
from fedhet.client.proximal import prox_effective_steps
from fedhet.core.cohort import Cohort
from fedhet.core.options import option
from fedhet.core.registry import CLIENT_SOLVERS, SERVERS, register_algorithm
from fedhet.server.averaging import AverageAllAggregator
from fedhet.server.base import ComposedServer, ServerOptions, SGDOptimizer
from fedhet.server.methods import server_method

DUAL = "dual"
ANCHOR_OFFSET = "anchor_offset"


@dataclasses.dataclass(frozen=True)
class FedADMMOptions(ClientOptions):
    """``[client]`` options of ``fedadmm``."""

    rho: float = option(0.1, gt=0, symbol="rho",
                        help="augmented-Lagrangian penalty: local objective f_i(w) + <y_i, w - x> + (rho/2)||w - x||^2")


class InitialParamsState(NamedTuple):
    """:class:`InitialParams`' state: FedADMM's anchor ``x^0``."""

    initial_params: torch.Tensor


class FedADMMSolver(LocalSolver):
    """FedADMM's client: ``direction = grad f_i(w) + y_i + rho (w - x)``; see the module docstring."""

    keeps_gradient = False      # the gradient is read once, in the step (client.base.GradFn)
    lockstep_knobs = ("rho",)     # read only arithmetically: a per-row column in lockstep runs
    client_state_names = (DUAL, ANCHOR_OFFSET)

    def __init__(self, options: FedADMMOptions):
        super().__init__(options)
        self.rho = options.rho

    def server_stage(self) -> "InitialParams":
        return InitialParams()

    def begin(self, x, client_state, broadcast, learning_rate, context=None) -> dict[str, Any]:
        return {"dual": client_state[DUAL], "initial_params": broadcast["initial_params"]}

    def direction(self, w: torch.Tensor, x: torch.Tensor, grad_fn: GradFn,
                  local: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        loss, grad = self.gradient(w, grad_fn)
        return loss, grad + local["dual"] + self.rho * (w - x)

    def segment_direction(self, grad: torch.Tensor, w: torch.Tensor, x: torch.Tensor, local: dict[str, Any],
                          part: slice) -> torch.Tensor:
        return super().segment_direction(grad, w, x, local, part) + local["dual"][part] + self.rho * (w - x[part])

    def finish(self, x, w, local, client_state, num_steps, learning_rate):
        dual = client_state[DUAL] + self.rho * (w - x)
        offset = (w + dual / self.rho) - local["initial_params"]     # theta_i+ - x^0
        change = offset - client_state[ANCHOR_OFFSET]                # theta_i+ - theta_i
        return change, {DUAL: dual, ANCHOR_OFFSET: offset}, {}

    def effective_steps(self, num_steps: torch.Tensor, learning_rate: float) -> torch.Tensor:
        # The local recursion contracts towards x by (1 - eta_l rho) per step, as FedProx's does.
        return prox_effective_steps(num_steps, learning_rate, self.rho)


class InitialParams:
    """FedADMM's anchor ``x^0`` (a :class:`~fedhet.server.base.ServerStage`): the initial model,
    kept unchanged and broadcast as ``initial_params``."""

    def init(self, params: torch.Tensor, context: Any) -> InitialParamsState:
        return InitialParamsState(params.clone())

    def update(self, state: InitialParamsState, cohort: Cohort, context: Any, params: torch.Tensor) -> InitialParamsState:
        return state

    def broadcast(self, state: InitialParamsState) -> dict[str, torch.Tensor]:
        return {"initial_params": state.initial_params}


@CLIENT_SOLVERS.register("fedadmm", FedADMMOptions)
def make_fedadmm(options: FedADMMOptions) -> LocalSolver:
    """FedADMM: grad + y_i + rho (w - x); y_i += rho (w_K - x); report the change of w_i + y_i/rho (Wang et al. 2022)."""
    return FedADMMSolver(options)


@SERVERS.register("fedadmm", ServerOptions, gradient_step=True)
def make_fedadmm_server(options: ServerOptions) -> ComposedServer:
    """FedADMM's server: x <- x + (eta_g/N) sum_S change_i."""
    # The sum over this round's clients divided by all N ("average all" in the FedAU paper).
    return server_method(AverageAllAggregator(), SGDOptimizer(options.learning_rate), options)


register_algorithm("fedadmm", client="fedadmm", server="fedadmm")
