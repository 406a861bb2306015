"""FedNova (Wang, Liu, Liang, Joshi, Poor, NeurIPS 2020)

Normalised averaging ("Tackling the Objective Inconsistency Problem in Heterogeneous Federated
Optimization", Eq. 6-7). Clients that take different numbers of local steps (system heterogeneity)
pull plain FedAvg towards the objectives of the clients that run longest. FedNova divides each client's update by its
normalised step count ``a_i`` and rescales the average by the effective number of steps::

    G = tau_eff sum_{i in S} p_i g_i / a_i,      tau_eff = sum_{i in S} p_i a_i,      x <- x - eta_g G

with ``p_i = n_i / sum_{j in S} n_j`` and ``g_i = -delta_i``. ``a_i`` is the cohort's extra
``effective_steps``, each client's :meth:`~fedhet.client.base.LocalSolver.effective_steps`
(:func:`~fedhet.client.base.with_effective_steps`): ``K_i`` for plain local SGD,
``sum_{k<K_i} (1 - eta_l mu)^k`` with a proximal term (FedProx). When every ``a_i`` is equal FedNova
is FedAvg. A client that took no step (``a_i = 0``) uploaded ``delta_i = 0`` and contributes nothing.
``algorithm = "fednova"`` is local SGD (``client.name = "sgd"``) with this server method; the method
runs with any solver.

Its rule is in docs/algorithms.md section 2 (server methods).

Rule table server:
    | FedNova (Wang 2020) | normalised: `G = tau_eff sum_S p_i g_i / a_i`, `tau_eff = sum_S p_i a_i` |
        `x <- x - eta_g G`; for plain local SGD `a_i = K_i`; with local momentum rho `a_i = sum_k (1-rho^k)/(1-rho)`;
        with prox mu `a_i = sum_{k<K} (1 - eta_l mu)^k` |
"""
from __future__ import annotations

from typing import Any

import torch

from fedhet.core.cohort import EFFECTIVE_STEPS, Cohort
from fedhet.core.registry import SERVERS, register_algorithm
from fedhet.server.base import ComposedServer, NoState, ServerContext, ServerOptions, SGDOptimizer, data_size_weights
from fedhet.server.methods import server_method


class NormalizedAverageAggregator:
    """FedNova's aggregation ``G = tau_eff sum_S p_i g_i / a_i`` (module docstring); keeps no state."""

    def init(self, params: torch.Tensor, context: ServerContext) -> NoState:
        return NoState()

    def aggregate(self, state: dict[str, Any], cohort: Cohort, context: ServerContext):
        if len(cohort) == 0:
            return None, state, {}
        dtype = cohort.deltas.dtype
        data_weights = data_size_weights(cohort).to(torch.float64)
        if EFFECTIVE_STEPS not in cohort.extras:
            raise ValueError("FedNova needs each client's a_i as the cohort extra 'effective_steps' "
                             "(fedhet.client.base.with_effective_steps); this cohort has none")
        effective = cohort.extras[EFFECTIVE_STEPS].to(device=cohort.deltas.device, dtype=torch.float64)
        if bool((effective < 0).any()) or not bool(torch.isfinite(effective).all()):
            raise ValueError(f"FedNova: the solver's effective step counts a_i must be finite and >= 0, "
                             f"got {effective.tolist()}")
        tau_eff = float(data_weights @ effective)
        # a_i = 0 only for a client that took no step (delta_i = 0): its term is 0, not 0/0.
        inverse = torch.where(effective > 0, 1.0 / effective.clamp(min=1e-300), torch.zeros_like(effective))
        weights = (tau_eff * data_weights * inverse).to(dtype)
        metrics = {"fednova_tau_eff": tau_eff}
        return weights @ cohort.pseudo_gradients, state, metrics


@SERVERS.register("fednova", ServerOptions, gradient_step=True)
def make_fednova(options: ServerOptions) -> ComposedServer:
    """FedNova: G = tau_eff sum_S p_i g_i / a_i, tau_eff = sum_S p_i a_i; x <- x - eta_g G (Wang et al. 2020)."""
    return server_method(NormalizedAverageAggregator(), SGDOptimizer(options.learning_rate), options)


register_algorithm("fednova", client="sgd", server="fednova")
