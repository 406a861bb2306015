"""FedAWARE (Zeng et al., AISTATS 2025)

Zeng et al., "On the Power of Adaptive Weighted Aggregation in Heterogeneous Federated Learning
and Beyond" (AISTATS 2025), Algorithm 1, and Zeng et al., "Tackling Hybrid Heterogeneity on
Federated Optimization via Gradient Diversity Maximization" (Algorithm 1 there); docs/algorithms.md
section 3. The server keeps a momentum ``m_i`` per client; per round ``t`` with participants ``S_t``::

    m_i <- (1 - alpha) m_i + alpha g_i     for i in S_t;   m_i unchanged otherwise      (Eq. 3)
    lambda = argmin_{lambda in simplex} || sum_i lambda_i m_i ||^2                       (Eq. 2 / 8)
    d = sum_i lambda_i m_i;     x <- x - eta_g d                         (eta_g = 1 in the papers)

with ``g_i = x - y_i`` (docs/algorithms.md section 1) and ``m_i = 0`` before client ``i`` first trains.
The earlier (hybrid-heterogeneity) paper writes ``alpha m + (1 - alpha) g``; fedhet uses the AISTATS
form, in which ``alpha`` weights the new update (the two agree at ``alpha = 0.5``). The clients run
plain local SGD (``algorithm = "fedaware"`` is ``client.name = "sgd"`` with this server).

Rule table server:
    | FedAWARE | see section 3 | |

The three lines are :class:`FedAwareAggregator`'s three calls of the direction building block
(:mod:`fedhet.server.aware_direction`, shared with the AWARE transform of any gradient-step method,
:mod:`fedhet.server.aware`): how the momenta are stored (the run's storage dtype, memory mapping),
the Gram matrix kept incrementally, the min-norm solver, and the fast kernel beside the plain
reference (``server.kernel``) are described there.

Options:

- **normalize** (default ``True``, the authors' released code, which produced the published
  numbers): every momentum is unit-normalised before the solve, i.e. the solver sees
  ``Qhat = D^-1/2 Q D^-1/2`` (``D = diag(Q)``), and the step is ``d = sum_i lambda_i m_i / ||m_i||``,
  so ``||x_{t+1} - x_t|| <= eta_g``. ``False`` is the papers' Eq. (2) on raw momenta; its minimum-
  norm point is typically tiny, so it takes much smaller steps and trains far more slowly.
- **uniform_weights** (the papers' "FedAWARE-NA" ablation, AISTATS Figure 4): ``lambda`` uniform over
  the momenta in the simplex (with ``normalize``, over the unit-normalised momenta).
- **momentum_layers** (the papers' "Limitation and feasible solutions": "computing (2) with the
  last few layers"): the store keeps only the coordinates of the named parameters, so ``lambda``
  is computed from those coordinates and ``d`` on them is ``sum_i lambda_i m_i`` (normalised or not
  as above). The other coordinates have no stored momenta, and ``lambda`` cannot be applied to the
  updates of clients that did not train this round; fedhet steps along the FedAvg aggregate
  ``sum_{i in S} p_i g_i`` (``p_i = n_i / n_S``) there. So the stored layers follow FedAWARE and
  the rest follows FedAvg, each on its own scale (unit-normalised vs raw when ``normalize``).
- Clients never seen (and seen clients whose stored momentum is exactly zero) are left out of the
  simplex: ``m_i = 0`` would make the minimum norm zero and stop training (docs/algorithms.md
  section 3). With no client in the simplex yet, there is no step.

Warm-up: the authors' code first sweeps all clients without replacement and can start with a
full-participation round; in fedhet these are participation options (``participation.explore``,
``participation.startup_round``), usable with any method. The server side of the warm-up depends on
``participation.explore`` (the participation process's
:meth:`~fedhet.participation.base.ParticipationProcess.explores`, the server's
``ServerContext.participation_explore``):

- **explore on** (the authors' code): while some client has never trained (counted after this
  round's momenta update), the step is plain FedAvg, ``G = sum_{i in S} (n_i / n_S) g_i``, and the
  momenta are still updated; from the round in which the last client is seen on, the min-norm
  solve runs over all N momenta. Metric ``aware_warmup`` is 1 in the FedAvg rounds, else 0.
- **explore off**: no FedAvg phase; from round 0 the solve runs over the clients seen so far, which
  is all N once every client has trained (at once with ``startup_round``).

A round in which nobody trained leaves every momentum unchanged and still steps along ``d``
computed from them (Algorithm 1 with ``S_t`` empty); on ``momentum_layers`` runs the other
coordinates then get no step.

Metrics each round: ``aware_weight_entropy`` (``-sum lambda_i ln lambda_i``, nats),
``aware_num_nonzero`` (clients with ``lambda_i > 0``), ``aware_num_seen`` (clients in the simplex),
``solver_iterations``, ``solver_gap`` (the final Frank-Wolfe duality gap); with the composed
server's ``pseudo_grad_norm = ||d||`` and ``update_norm``.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from fedhet.core.cohort import Cohort
from fedhet.core.options import option
from fedhet.core.registry import SERVERS, register_algorithm
from fedhet.server.aware_direction import DirectionSettings, DirectionState, MomentumDirection
from fedhet.server.aware_options import AwareOptions, aware_field
from fedhet.server.base import ComposedServer, ServerContext, ServerOptions, SGDOptimizer, data_size_weights
from fedhet.server.methods import server_method


@dataclasses.dataclass(frozen=True)
class FedAwareOptions(ServerOptions):
    """``[server]`` options of ``fedaware``: :class:`~fedhet.server.aware_options.AwareOptions`
    (declared from it) and the NA ablation."""

    alpha: float = aware_field("alpha")
    normalize: bool = aware_field("normalize")
    uniform_weights: bool = option(False, help="ablation 'FedAWARE-NA': uniform lambda over the momenta of the "
                                               "clients seen so far instead of the min-norm weights")
    solver_tol: float = aware_field("solver_tol")
    solver_max_iter: int = aware_field("solver_max_iter")
    momentum_layers: tuple[str, ...] = aware_field("momentum_layers")
    kernel: str = aware_field("kernel")


# FedAWARE's state: the momenta m_i (a per-client store, written in place: docs/design.md "State")
# and their Gram matrix Q = M M^T (float64 [N, N]).
FedAwareState = DirectionState


class FedAwareAggregator:
    """Aggregator stage of FedAWARE: the momentum update, the min-norm weights, ``G = d``."""

    def __init__(self, settings: DirectionSettings):
        self.direction = MomentumDirection(settings)

    def init(self, params: torch.Tensor, context: ServerContext) -> FedAwareState:
        return self.direction.init(params, context)

    def aggregate(self, state: FedAwareState, cohort: Cohort,
                  context: ServerContext) -> tuple[Optional[torch.Tensor], FedAwareState, dict[str, float]]:
        state = self.direction.observe(state, cohort, context)      # m_i <- (1-alpha) m_i + alpha g_i  (Eq. 3)
        if context.participation_explore and not bool(state.momenta.written.all()):
            # The authors' code: FedAvg steps until the exploration sweep has seen every client.
            metrics = {"aware_warmup": 1.0, "aware_num_seen": float(int(state.momenta.written.sum()))}
            if len(cohort) == 0:
                return None, state, metrics
            return data_size_weights(cohort) @ cohort.pseudo_gradients, state, metrics
        weights = self.direction.solve(state)                       # lambda = argmin ||sum lambda_i m_i||^2  (Eq. 2)
        d, metrics = self.direction.combine(state, weights, cohort)  # d = sum_i lambda_i m_i
        if context.participation_explore:
            metrics = {**metrics, "aware_warmup": 0.0}
        return d, state, metrics


@SERVERS.register("fedaware", FedAwareOptions, gradient_step=True)
def make_fedaware(options: FedAwareOptions) -> ComposedServer:
    """FedAWARE (Zeng et al., AISTATS 2025): x <- x - eta_g d, d the min-norm combination of the momenta."""
    settings = DirectionSettings.of(AwareOptions.read(options), uniform_weights=options.uniform_weights,
                                    store_name="fedaware_momentum", option_prefix="server.")
    return server_method(FedAwareAggregator(settings), SGDOptimizer(options.learning_rate), options)


register_algorithm("fedaware", client="sgd", server="fedaware")
