"""The AWARE extension: project any server method's step onto FedAWARE's direction.

Zeng et al., "On the Power of Adaptive Weighted Aggregation in Heterogeneous Federated Learning and
Beyond" (FedAWARE, AISTATS 2025), Proposition 3.1; docs/algorithms.md section 3. For a method whose
server step is ``x <- x - eta_g dtilde`` (FedAvg, FedAvgM, FedProx, FedYogi, FedAdam, FedAMS, ...),
keep FedAWARE's per-client momenta alongside, compute FedAWARE's ``d`` and step along

    d_proj = (<dtilde, d> / <d, d>) d,          x <- x - eta_g d_proj.

fedhet applies it to the optimiser's final step ``u = eta_g dtilde`` (after its momentum or adaptive
transform): ``u <- (<u, d>/<d, d>) d``, which is the same thing. It is one
:class:`~fedhet.server.base.StepTransform`, :class:`AwareProjection`, that
:func:`~fedhet.server.methods.server_method` puts after the optimiser of *every* named method when
``server.aware = true``; no method has AWARE code of its own. A method whose server update is not a
gradient step (FedDyn) says so in its registration (``gradient_step=NotAGradientStep(reason)``,
:class:`fedhet.core.registry.ServerRegistry`), and :func:`fedhet.algorithms.server_for` then refuses
``server.aware = true`` with a ConfigError.

The momenta, their Gram matrix and ``d`` are FedAWARE's (:class:`fedhet.server.aware_direction.MomentumDirection`),
tuned by the ``aware_*`` options of :class:`~fedhet.server.base.ServerOptions` (``aware_alpha``,
``aware_normalize``, ``aware_solver_tol``, ``aware_solver_max_iter``, ``aware_momentum_layers``,
``aware_kernel``, the fast kernel or the plain reference beside it: an
:class:`~fedhet.server.aware_options.AwareOptions`, read by ``AwareOptions.read(options, "aware_")``),
stored in a per-client store named ``aware_momentum`` (the run's dtype, memory mapping; checkpointed).
The momenta are updated from every round's uploads ``g_i``, whatever the method's own aggregation.

Warm-up: with ``participation.explore`` on (the authors' exploration sweep), the method's step is left
unchanged until every client has trained once, as FedAWARE itself steps like FedAvg then
(:mod:`fedhet.algorithms.fedaware`, "Warm-up"); the momenta are still updated from every round, and the
projection starts in the round in which the last client is seen (metric ``aware_warmup``: 1 before, 0
from then on). Without explore the projection uses the clients seen so far from the first round.

The projection is one float64 formula (:func:`project_onto`), the same on both kernels;
``server.aware_kernel`` chooses the direction's (the fast kernel or the plain reference,
:mod:`fedhet.server.aware_direction`).

Edge cases: before any client with a non-zero momentum has been seen there is no ``d`` and the
method's step is left unchanged; if ``d = 0`` (the convex hull of the momenta contains 0: no common
descent direction) the projected step is zero.

Metrics: ``aware_cosine`` (cosine between the method's step ``u`` and ``d``; 0 when either is zero;
NaN before there is a ``d``), and FedAWARE's ``aware_weight_entropy``,
``aware_num_nonzero``, ``aware_num_seen``, ``solver_iterations``, ``solver_gap``.
"""
from __future__ import annotations

import math

import torch

from fedhet.core.cohort import Cohort
from fedhet.server.aware_direction import DirectionSettings, DirectionState, MomentumDirection
from fedhet.server.aware_options import AwareOptions
from fedhet.server.base import ServerContext, ServerOptions


def project_onto(update: torch.Tensor, direction: torch.Tensor) -> tuple[torch.Tensor, float, float]:
    """``((<u, d>/<d, d>) d, <u, d>/<d, d>, cos(u, d))`` with float64 inner products; a zero ``d``
    gives a zero step (scale and cosine 0)."""
    u64, d64 = update.to(torch.float64), direction.to(torch.float64)
    dd = float(d64 @ d64)
    if dd == 0.0:
        return torch.zeros_like(update), 0.0, 0.0
    ud = float(u64 @ d64)
    scale = ud / dd
    uu = float(u64 @ u64)
    cosine = ud / math.sqrt(uu * dd) if uu > 0 else 0.0
    return (scale * d64).to(update.dtype), scale, cosine


class AwareProjection:
    """Step transform ``u <- (<u, d>/<d, d>) d`` with FedAWARE's ``d`` (module docstring)."""

    def __init__(self, settings: DirectionSettings):
        self.direction = MomentumDirection(settings)

    @classmethod
    def from_options(cls, options: ServerOptions) -> "AwareProjection":
        """The projection tuned by the ``aware_*`` options of any server method."""
        return cls(DirectionSettings.of(AwareOptions.read(options, "aware_"), store_name="aware_momentum",
                                        option_prefix="server.aware_"))

    def init(self, params: torch.Tensor, context: ServerContext) -> DirectionState:
        return self.direction.init(params, context)

    def observe(self, state: DirectionState, cohort: Cohort, context: ServerContext) -> DirectionState:
        return self.direction.observe(state, cohort, context)

    def apply(self, state: DirectionState, update: torch.Tensor, cohort: Cohort,
              context: ServerContext) -> tuple[torch.Tensor, DirectionState, dict[str, float]]:
        if context.participation_explore:
            seen = state.momenta.written
            if not bool(seen.all()):
                # The sweep has not filled the memory: a d over a few clients' momenta would steer the
                # step by them alone (the authors' code steps like the plain method until it is full).
                return update, state, {"aware_warmup": 1.0, "aware_num_seen": float(int(seen.sum())),
                                       "aware_cosine": math.nan}
        direction, metrics = self.direction.direction(state, cohort)
        if context.participation_explore:
            metrics = {**metrics, "aware_warmup": 0.0}
        if direction is None:
            return update, state, {**metrics, "aware_cosine": math.nan}
        projected, _, cosine = project_onto(update, direction.to(device=update.device, dtype=update.dtype))
        return projected, state, {**metrics, "aware_cosine": cosine}
