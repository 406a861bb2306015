"""SCAFFOLD (Karimireddy, Kale, Mohri, Reddi, Stich, Suresh, ICML 2020)

Stochastic controlled averaging, Algorithm 1 with option II of its control-variate update (line 12).
Client i (control variate ``c_i``, server control variate ``c``)::

    w <- w - eta_l (grad f_i(w) - c_i + c)                        K_i local steps from x
    c_i+ = c_i - c + (x - w_K) / (K_i eta_l)                      option II
    upload delta_i = w_K - x and dc_i = c_i+ - c_i

Server::

    c <- c + (1/N) sum_{i in S} dc_i                              (ControlVariate stage, broadcast)
    x <- x + eta_g (1/|S|) sum_{i in S} delta_i                   (server method "scaffold")

``K_i`` is the client's own step count, so the rule stays exact under system heterogeneity.
``c_i`` lives in the engine's per-client store (``client_state_names``); ``c`` is server-side
state the clients need, so it is the server method's (:class:`ControlVariate`, the solver's
:meth:`~ScaffoldSolver.server_stage`; docs/design.md "Server-side state"), with any server method.
Both are checkpointed with the run. The ``x`` update is the unweighted mean over the participants,
the shared ``AverageParticipatingAggregator``, with the shared server SGD step.

Its rule is in docs/algorithms.md section 5 (local solvers).

Rule table local:
    | SCAFFOLD option II (Karimireddy 2020) | gradient `+ c - c_i` | `c_i+ = c_i - c + (x - w_K)/(K eta_l)`;
        upload `delta` and `c_i+ - c_i`; server `c <- c + (1/N) sum_S (c_i+ - c_i)`, `x <- x + eta_g mean_S delta` |
"""
from __future__ import annotations

from typing import Any, NamedTuple

import torch

from fedhet.client.base import ClientOptions, GradFn, LocalSolver, per_client
from fedhet.core.cohort import Cohort
from fedhet.core.registry import CLIENT_SOLVERS, SERVERS, register_algorithm
from fedhet.server.averaging import AverageParticipatingAggregator
from fedhet.server.base import ComposedServer, ServerOptions, SGDOptimizer
from fedhet.server.methods import server_method

CONTROL_VARIATE = "control_variate"
CONTROL_VARIATE_CHANGE = "control_variate_change"


class ControlVariateState(NamedTuple):
    """:class:`ControlVariate`'s state: the server control variate ``c``."""

    control_variate: torch.Tensor


class ScaffoldSolver(LocalSolver):
    """SCAFFOLD option II: ``direction = grad f_i(w) + c - c_i``; see the module docstring."""

    keeps_gradient = False      # the gradient is read once, in the step (client.base.GradFn)
    client_state_names = (CONTROL_VARIATE,)
    # Upload: delta_i and the control-variate change Delta c_i (the paper's (Delta y_i, Delta c_i)).
    uploaded_vectors = 2

    def server_stage(self) -> ControlVariate:
        return ControlVariate()

    def begin(self, x: torch.Tensor, client_state: dict[str, torch.Tensor],
              broadcast: dict[str, torch.Tensor], learning_rate: float, context=None) -> dict[str, Any]:
        # c - c_i is constant during local training: form it once.
        return {"correction": broadcast["control_variate"] - client_state[CONTROL_VARIATE],
                "server_control_variate": broadcast["control_variate"]}

    def direction(self, w: torch.Tensor, x: torch.Tensor, grad_fn: GradFn,
                  local: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        loss, grad = self.gradient(w, grad_fn)
        return loss, grad + local["correction"]

    def segment_direction(self, grad: torch.Tensor, w: torch.Tensor, x: torch.Tensor, local: dict[str, Any],
                          part: slice) -> torch.Tensor:
        return super().segment_direction(grad, w, x, local, part) + local["correction"][part]

    def finish(self, x, w, local, client_state, num_steps, learning_rate):
        old = client_state[CONTROL_VARIATE]
        steps = per_client(num_steps, w)
        new = old - local["server_control_variate"] + (x - w) / (steps * learning_rate)
        return w - x, {CONTROL_VARIATE: new}, {CONTROL_VARIATE_CHANGE: new - old}


class ControlVariate:
    """SCAFFOLD's server control variate ``c`` (a :class:`~fedhet.server.base.ServerStage`):
    ``c_0 = 0``, ``c <- c + (1/N) sum_S (c_i+ - c_i)`` (unchanged in a round nobody trained);
    broadcast as ``control_variate``."""

    def init(self, params: torch.Tensor, context: Any) -> ControlVariateState:
        return ControlVariateState(torch.zeros_like(params))

    def update(self, state: ControlVariateState, cohort: Cohort, context: Any, params: torch.Tensor) -> ControlVariateState:
        if len(cohort) == 0:
            return state
        change = cohort.extras[CONTROL_VARIATE_CHANGE].sum(dim=0) / context.num_clients
        return ControlVariateState(state.control_variate + change.to(params.dtype))

    def broadcast(self, state: ControlVariateState) -> dict[str, torch.Tensor]:
        return {"control_variate": state.control_variate}


@CLIENT_SOLVERS.register("scaffold", ClientOptions)
def make_scaffold(options: ClientOptions) -> LocalSolver:
    """SCAFFOLD option II: grad + c - c_i; c_i+ = c_i - c + (x - w_K)/(K eta_l) (Karimireddy et al. 2020)."""
    return ScaffoldSolver(options)


@SERVERS.register("scaffold", ServerOptions, gradient_step=True)
def make_scaffold_server(options: ServerOptions) -> ComposedServer:
    """SCAFFOLD's server: x <- x + eta_g mean_S delta_i (c is the solver's server stage)."""
    # Karimireddy et al. 2020, Algorithm 1: the unweighted mean over the participants.
    return server_method(AverageParticipatingAggregator(), SGDOptimizer(options.learning_rate), options)


register_algorithm("scaffold", client="scaffold", server="scaffold")
