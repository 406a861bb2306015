"""FedMGDA+ (Hu, Wang, Gong, Yu, IEEE TNSE 2022)

"FedMGDA+: Federated Learning meets Multi-objective Optimization": multiple-gradient descent over
this round's clients, with weights kept near the data weights ``p``; docs/algorithms.md section 2.
Each round, with ``ghat_i = g_i / ||g_i||`` for ``i in S_t``::

    lambda = argmin || sum_{i in S} lambda_i ghat_i ||^2
             over { lambda : sum_i lambda_i = 1,  lambda_i >= 0,  |lambda_i - p_i| <= eps }
    x <- x - eta_g sum_{i in S} lambda_i ghat_i

``p_i = n_i / n_S`` are the data weights; ``eps = 1`` (or more) is the plain simplex, whose solution
is the minimum-norm point of the convex hull (:func:`fedhet.server.min_norm.min_norm_weights`);
``eps = 0`` fixes ``lambda = p`` (the data-weighted average of the normalised updates).

Solver for ``eps < 1`` (:func:`box_simplex_min_norm`): the feasible set is the polytope
``{sum lambda = 1, lo <= lambda <= hi}`` with ``lo = max(0, p - eps)``, ``hi = min(1, p + eps)``.

- Its linear minimisation oracle is a greedy fill: start from ``lo`` and hand out the remaining
  mass ``1 - sum lo`` to coordinates in ascending order of the gradient, each up to ``hi_i``
  (a fractional knapsack). It gives the Frank-Wolfe duality gap
  ``gap = <lambda - s, Q lambda>`` (``f(lambda) - f* <= 2 gap`` for ``f = lambda^T Q lambda``), the
  stopping rule: ``gap <= max(tol * lambda^T Q lambda, floor)``, with the rounding floor of
  :mod:`fedhet.server.min_norm`.
- Its edges are parallel to ``e_i - e_j``, so the steps are pairwise (edge) Frank-Wolfe steps along
  the maximal violating pair: move mass to ``i = argmin_{lambda_i < hi_i} (Q lambda)_i`` from
  ``j = argmax_{lambda_j > lo_j} (Q lambda)_j``, exact line search clipped to the box. This is the
  SMO method for box-and-one-equality QPs (Keerthi & Gilbert 2002), which converges, linearly in
  the end (Chen, Fan & Lin 2006), where plain Frank-Wolfe steps towards the greedy vertex converge
  as O(1/k) when the optimum is inside a face. ``Q lambda`` is updated in O(N) per step.

A client whose update is exactly zero has no direction; its ``ghat_i`` is taken as zero, so the
minimum norm is zero (that client is stationary: no common descent direction) and the step is
zero (up to the solver's rounding floor). Metrics: ``mgda_weight_entropy``, ``mgda_num_nonzero``, ``solver_iterations``,
``solver_gap``.

Rule table server:
    | FedMGDA+ (Hu 2022) | unit-normalised `g_i` of this round's clients; `lambda = argmin ||sum lambda_i ghat_i||^2`
        on the simplex intersected with `|lambda_i - p_i| <= eps` (eps=1 gives the plain simplex) |
        `x <- x - eta_g sum lambda_i ghat_i` |
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from fedhet.core.cohort import Cohort
from fedhet.core.options import option
from fedhet.core.registry import SERVERS
from fedhet.server.aware_direction import weight_entropy
from fedhet.server.base import ComposedServer, NoState, ServerContext, ServerOptions, SGDOptimizer
from fedhet.server.gram import normalized_gram
from fedhet.server.methods import server_method
from fedhet.server.min_norm import min_norm_weights

# Same rounding floor as fedhet.server.min_norm: 8 N eps_float64 max_i Q_ii.
_ROUNDING_FACTOR = 8.0
# Recompute Q lambda exactly every max(N, this) steps (rounding drift of the O(N) updates).
_MIN_REFRESH_PERIOD = 100


@dataclasses.dataclass(frozen=True)
class FedMgdaOptions(ServerOptions):
    """``[server]`` options of ``fedmgda_plus``."""

    epsilon: float = option(0.1, ge=0, symbol="epsilon",
                            help="how far the weights may move from the data weights: |lambda_i - p_i| <= epsilon "
                                 "(1 = plain simplex, 0 = lambda = p)")
    solver_tol: float = option(1e-8, ge=0, help="relative Frank-Wolfe duality-gap tolerance of the weight solve")
    solver_max_iter: int = option(10000, ge=1, help="iteration cap of the weight solve")


def box_simplex_min_norm(gram: torch.Tensor, center: torch.Tensor, epsilon: float, *, tol: float = 1e-8,
                         max_iter: int = 10000) -> tuple[torch.Tensor, dict[str, Any]]:
    """Minimise ``w^T Q w`` over ``{sum w = 1, w >= 0, |w - center| <= epsilon}``.

    ``gram``: symmetric PSD ``[K, K]``; ``center``: ``[K]`` on the simplex (e.g. data weights).
    ``epsilon >= 1`` is the plain simplex and is delegated to
    :func:`~fedhet.server.min_norm.min_norm_weights`. Returns float64 weights (CPU) and ``info``
    with ``iterations``, ``gap``, ``objective``, ``converged``. See the module docstring.
    """
    if gram.ndim != 2 or gram.shape[0] != gram.shape[1] or gram.shape[0] == 0:
        raise ValueError(f"box_simplex_min_norm: gram must be a non-empty square matrix, got {tuple(gram.shape)}")
    p = center.detach().to(device="cpu", dtype=torch.float64).numpy()
    if p.shape != (gram.shape[0],) or np.any(p < 0) or abs(p.sum() - 1.0) > 1e-6:
        raise ValueError("box_simplex_min_norm: center must be a point of the simplex with one entry per row "
                         f"of gram (non-negative, summing to 1); got {p.tolist()}")
    p = p / p.sum()     # exactly on the simplex (a float32 center sums to 1 only to ~1e-7)
    if not epsilon >= 0:
        raise ValueError(f"box_simplex_min_norm: epsilon must be >= 0, got {epsilon!r}")
    if epsilon >= 1.0:
        weights, info = min_norm_weights(gram, tol=tol, max_iter=max_iter)
        return weights.to("cpu"), info
    q = gram.detach().to(device="cpu", dtype=torch.float64).numpy()
    q = 0.5 * (q + q.T)
    lo = np.maximum(0.0, p - epsilon)
    hi = np.minimum(1.0, p + epsilon)
    return _solve_box_simplex(q, p.copy(), lo, hi, float(tol), int(max_iter))


def _greedy_vertex(gradient: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``argmin_s <gradient, s>`` over ``{sum s = 1, lo <= s <= hi}`` (fractional knapsack)."""
    vertex = lo.copy()
    remaining = 1.0 - float(lo.sum())
    for i in np.argsort(gradient, kind="stable"):
        if remaining <= 0:
            break
        added = min(hi[i] - lo[i], remaining)
        vertex[i] += added
        remaining -= added
    return vertex


def _solve_box_simplex(q: np.ndarray, w: np.ndarray, lo: np.ndarray, hi: np.ndarray, tol: float,
                       max_iter: int) -> tuple[torch.Tensor, dict[str, Any]]:
    n = q.shape[0]
    floor = _ROUNDING_FACTOR * n * np.finfo(np.float64).eps * float(max(np.max(np.diag(q)), 0.0))
    g = q @ w
    refresh_period = max(n, _MIN_REFRESH_PERIOD)
    iterations = 0
    stationary = False
    while True:
        objective = float(w @ g)
        gap = float(g @ (w - _greedy_vertex(g, lo, hi)))
        threshold = max(tol * objective, floor)
        converged = gap <= threshold or objective <= floor
        if converged or iterations >= max_iter:
            break
        can_grow = w < hi
        can_shrink = w > lo
        if not can_grow.any() or not can_shrink.any():
            stationary = True       # a single feasible point (e.g. epsilon = 0)
            break
        i = int(np.argmin(np.where(can_grow, g, np.inf)))
        j = int(np.argmax(np.where(can_shrink, g, -np.inf)))
        decrease = float(g[j] - g[i])
        if i == j or not decrease > 0:
            stationary = True       # KKT conditions hold to working precision
            break
        curvature = float(q[i, i] + q[j, j] - 2.0 * q[i, j])
        grow_room, shrink_room = float(hi[i] - w[i]), float(w[j] - lo[j])
        max_step = min(grow_room, shrink_room)
        step = max_step if curvature <= 0 else min(decrease / curvature, max_step)
        if not step > 0:
            stationary = True
            break
        w = w.copy()
        w[i] += step
        w[j] -= step
        if step >= max_step:
            # Land exactly on the bound that stopped the step, so the coordinate leaves the
            # "can grow" / "can shrink" set instead of hovering a rounding error away from it.
            if grow_room <= shrink_room:
                w[i] = hi[i]
            else:
                w[j] = lo[j]
        g = g + step * (q[i] - q[j])
        iterations += 1
        if iterations % refresh_period == 0:
            g = q @ w
    if stationary:
        # No feasible descent edge: report the gap of an exact Q w (no drift from the O(N) updates).
        g = q @ w
        objective = float(w @ g)
        gap = max(float(g @ (w - _greedy_vertex(g, lo, hi))), 0.0)
        converged = True
    info = {"iterations": iterations, "gap": gap, "objective": objective, "converged": bool(converged),
            "threshold": threshold, "floor": floor}
    return torch.from_numpy(w), info


class FedMgdaAggregator:
    """``G = sum_S lambda_i ghat_i`` with the constrained min-norm weights (module docstring)."""

    def __init__(self, epsilon: float, solver_tol: float, solver_max_iter: int):
        self.epsilon = epsilon
        self.solver_tol = solver_tol
        self.solver_max_iter = solver_max_iter

    def init(self, params: torch.Tensor, context: ServerContext) -> NoState:
        return NoState()

    def aggregate(self, state: dict[str, Any], cohort: Cohort, context: ServerContext):
        if len(cohort) == 0:
            return None, state, {}
        updates = cohort.pseudo_gradients
        gram = (updates @ updates.T).to(torch.float64)
        gram = 0.5 * (gram + gram.T)
        norms = gram.diagonal().clamp_min(0.0).sqrt()
        data_weights = cohort.num_examples.to(torch.float64) / cohort.num_examples.to(torch.float64).sum()
        weights, info = box_simplex_min_norm(normalized_gram(gram), data_weights, self.epsilon,
                                             tol=self.solver_tol, max_iter=self.solver_max_iter)
        # ghat_i = g_i / ||g_i||; a zero update contributes nothing (module docstring).
        inverse_norms = torch.where(norms.cpu() > 0, 1.0 / norms.cpu().clamp_min(1e-300), torch.zeros_like(norms.cpu()))
        coefficients = (weights * inverse_norms).to(device=updates.device, dtype=updates.dtype)
        metrics = {"mgda_weight_entropy": weight_entropy(weights),
                   "mgda_num_nonzero": float(int((weights > 0).sum())),
                   "solver_iterations": float(info["iterations"]), "solver_gap": float(info["gap"])}
        return coefficients @ updates, state, metrics


@SERVERS.register("fedmgda_plus", FedMgdaOptions, gradient_step=True)
def make_fedmgda_plus(options: FedMgdaOptions) -> ComposedServer:
    """FedMGDA+ (Hu et al. 2022): min-norm combination of normalised updates, weights near p.

    lambda = min-norm weights of the unit-normalised updates with |lambda_i - p_i| <= epsilon;
    x <- x - eta_g sum lambda_i g_i/||g_i||."""
    aggregator = FedMgdaAggregator(options.epsilon, options.solver_tol, options.solver_max_iter)
    return server_method(aggregator, SGDOptimizer(options.learning_rate), options)
