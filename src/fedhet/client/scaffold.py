"""SCAFFOLD, option II (Karimireddy, Kale, Mohri, Reddi, Stich, Suresh, ICML 2020, Algorithm 1).

Client i (control variate ``c_i``, server control variate ``c``)::

    w <- w - eta_l (grad f_i(w) - c_i + c)                        K_i local steps from x
    c_i+ = c_i - c + (x - w_K) / (K_i eta_l)                      option II
    upload delta_i = w_K - x and dc_i = c_i+ - c_i

Server::

    c <- c + (1/N) sum_{i in S} dc_i                              (solver-global state, broadcast)
    x <- x + eta_g (1/|S|) sum_{i in S} delta_i                   (server method "scaffold")

``K_i`` is the client's own step count, so the rule stays exact under system heterogeneity.
``c_i`` lives in the engine's per-client store (``client_state_names``), ``c`` in the solver's
global state; both are checkpointed with the run.
"""
from __future__ import annotations

from typing import Any

import torch

from fedhet.client.base import ClientOptions, GradFn, LocalSolver, per_client
from fedhet.core.cohort import Cohort
from fedhet.core.registry import CLIENT_SOLVERS, SERVERS, register_algorithm
from fedhet.server.base import ComposedServer, ServerOptions, ServerSGD, compose
from fedhet.server.participation_weighted import AverageParticipating

CONTROL_VARIATE = "control_variate"
CONTROL_VARIATE_CHANGE = "control_variate_change"


class ScaffoldSolver(LocalSolver):
    """SCAFFOLD option II: ``direction = grad f_i(w) + c - c_i``; see the module docstring."""

    client_state_names = (CONTROL_VARIATE,)

    def init_global(self, params: torch.Tensor) -> dict[str, Any]:
        return {"control_variate": torch.zeros_like(params)}

    def broadcast(self, global_state: dict[str, Any]) -> dict[str, torch.Tensor]:
        return {"control_variate": global_state["control_variate"]}

    def server_update(self, global_state: dict[str, Any], cohort: Cohort, num_clients: int,
                      params: torch.Tensor) -> dict[str, Any]:
        """``c <- c + (1/N) sum_S (c_i+ - c_i)``; unchanged in a round nobody trained."""
        if len(cohort) == 0:
            return global_state
        change = cohort.extras[CONTROL_VARIATE_CHANGE].sum(dim=0) / num_clients
        return {"control_variate": global_state["control_variate"] + change.to(params.dtype)}

    def begin(self, x: torch.Tensor, client_state: dict[str, torch.Tensor],
              broadcast: dict[str, torch.Tensor], learning_rate: float) -> dict[str, Any]:
        # c - c_i is constant during local training: form it once.
        return {"correction": broadcast["control_variate"] - client_state[CONTROL_VARIATE],
                "server_control_variate": broadcast["control_variate"]}

    def direction(self, w: torch.Tensor, x: torch.Tensor, grad_fn: GradFn,
                  local: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        loss, grad = self.gradient(w, grad_fn)
        return loss, grad + local["correction"]

    def finish(self, x, w, local, client_state, num_steps, learning_rate):
        old = client_state[CONTROL_VARIATE]
        steps = per_client(num_steps, w)
        new = old - local["server_control_variate"] + (x - w) / (steps * learning_rate)
        return w - x, {CONTROL_VARIATE: new}, {CONTROL_VARIATE_CHANGE: new - old}


@CLIENT_SOLVERS.register("scaffold", ClientOptions)
def make_scaffold(options: ClientOptions) -> LocalSolver:
    """SCAFFOLD option II: grad + c - c_i; c_i+ = c_i - c + (x - w_K)/(K eta_l) (Karimireddy et al. 2020)."""
    return ScaffoldSolver(options)


@SERVERS.register("scaffold", ServerOptions)
def make_scaffold_server(options: ServerOptions) -> ComposedServer:
    """SCAFFOLD's server: x <- x + eta_g mean_S delta_i (c is updated by the solver)."""
    # Karimireddy et al. 2020, Algorithm 1: the unweighted mean over the participants.
    return compose(AverageParticipating(), ServerSGD(options.learning_rate), options)


register_algorithm("scaffold", client="scaffold", server="scaffold")
