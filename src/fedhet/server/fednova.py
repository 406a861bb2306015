"""FedNova: normalised averaging (Wang, Liu, Liang, Joshi, Poor, "Tackling the Objective Inconsistency
Problem in Heterogeneous Federated Optimization", NeurIPS 2020, Eq. 6-7).

Clients that take different numbers of local steps (system heterogeneity) pull plain FedAvg towards
the objectives of the clients that run longest. FedNova divides each client's update by its
normalised step count ``a_i`` and rescales the average by the effective number of steps::

    G = tau_eff sum_{i in S} p_i g_i / a_i,      tau_eff = sum_{i in S} p_i a_i,      x <- x - eta_g G

with ``p_i = n_i / sum_{j in S} n_j`` and ``g_i = -delta_i``. ``a_i`` comes from the local solver's
:meth:`~fedhet.client.base.LocalSolver.effective_steps`: ``K_i`` for plain local SGD,
``sum_{k<K_i} (1 - eta_l mu)^k`` with a proximal term (FedProx). When every ``a_i`` is equal FedNova
is FedAvg. A client that took no step (``a_i = 0``) uploaded ``delta_i = 0`` and contributes nothing.
"""
from __future__ import annotations

from typing import Any

import torch

from fedhet.core.cohort import Cohort
from fedhet.core.registry import SERVERS, register_algorithm
from fedhet.server.base import ServerContext, ServerOptions, ServerSGD, compose, data_size_weights


class NormalizedAverage:
    """FedNova's aggregation ``G = tau_eff sum_S p_i g_i / a_i`` (module docstring). Stateless."""

    def init(self, params: torch.Tensor, context: ServerContext) -> dict[str, Any]:
        if context.solver is None or not hasattr(context.solver, "effective_steps"):
            raise ValueError("server fednova needs the local solver's effective_steps (FedNova's a_i); "
                             "the server context has no solver with that method")
        return {}

    def aggregate(self, state: dict[str, Any], cohort: Cohort, context: ServerContext):
        if len(cohort) == 0:
            return None, state, {}
        dtype = cohort.deltas.dtype
        data_weights = data_size_weights(cohort).to(torch.float64)
        local_steps = cohort.local_steps.to(cohort.deltas.device)
        effective = context.solver.effective_steps(local_steps, context.client_learning_rate)
        effective = effective.to(device=cohort.deltas.device, dtype=torch.float64)
        if bool((effective < 0).any()) or not bool(torch.isfinite(effective).all()):
            raise ValueError(f"FedNova: the solver's effective step counts a_i must be finite and >= 0, "
                             f"got {effective.tolist()}")
        tau_eff = float(data_weights @ effective)
        # a_i = 0 only for a client that took no step (delta_i = 0): its term is 0, not 0/0.
        inverse = torch.where(effective > 0, 1.0 / effective.clamp(min=1e-300), torch.zeros_like(effective))
        weights = (tau_eff * data_weights * inverse).to(dtype)
        metrics = {"fednova_tau_eff": tau_eff}
        return weights @ cohort.pseudo_gradients, state, metrics


@SERVERS.register("fednova", ServerOptions)
def make_fednova(options: ServerOptions):
    """FedNova: G = tau_eff sum_S p_i g_i / a_i, tau_eff = sum_S p_i a_i; x <- x - eta_g G (Wang et al. 2020)."""
    return compose(NormalizedAverage(), ServerSGD(options.learning_rate), options)


register_algorithm("fednova", client="sgd", server="fednova")
