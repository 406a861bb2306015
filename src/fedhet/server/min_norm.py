"""Minimum-norm point of the convex hull of vectors, given their Gram matrix.

FedAWARE's adaptive weights (AISTATS 2025, Eq. 2 / Eq. 8; docs/algorithms.md section 3) are

    lambda = argmin_{lambda in simplex} || sum_i lambda_i m_i ||^2 = argmin_{w in simplex} w^T Q w,

with ``Q_ij = <m_i, m_j>``. This module solves the quadratic on the ``N x N`` Gram matrix only.

Algorithm: pairwise Frank-Wolfe with exact line search (Lacoste-Julien & Jaggi, "On the global
linear convergence of Frank-Wolfe optimization variants", NeurIPS 2015), plus an occasional
*face step*. Plain Frank-Wolfe converges like O(1/k) when the optimum lies inside a face of the
simplex (the usual case here); the pairwise variant converges linearly on polytopes. Every
iteration keeps ``g = Q w`` up to date in O(N):

- FW vertex ``s = argmin_j g_j`` and away vertex ``a = argmax_{j: w_j > 0} g_j``;
- pairwise step along ``e_s - e_a``: ``gamma = clip((g_a - g_s) / (Q_ss + Q_aa - 2 Q_sa), 0, w_a)``
  (the exact minimiser of the quadratic along that line; a zero or negative curvature, which only
  rounding can produce, takes the full step ``w_a``), then ``g += gamma (Q[:, s] - Q[:, a])``.

Face step (an acceleration, not a different stopping rule): pairwise steps redistribute weight
inside the current support slowly when ``Q`` is ill-conditioned. Once the support has not changed
for a few steps, the solver moves towards the minimiser of ``w^T Q w`` on the affine hull of the
current face (``w ~ Q_SS^{-1} 1`` by Cholesky, with a tiny ridge when ``Q_SS`` is singular) with the exact
line search clipped to stay in the simplex. Clipping drops a vertex; the step is then repeated on
the smaller face (Wolfe's "minor cycle") a few times. Every step, pairwise or face, is an exact
line search along a feasible direction, so the objective never increases whatever the accuracy of
the face solve.

Start: uniform weights ``1/N`` (plain FedAvg weights). Measured on random Gram matrices: with an
interior optimum, the usual case for high-dimensional momenta (e.g. 100 unit vectors in 10^4
dimensions), the first face step from the full support lands on the optimum (about 10 iterations,
against about 100 from the smallest-diagonal vertex, which needs one pairwise step per vertex of the
optimal support); the vertex start wins when the optimum is very sparse (about 40 against 990
iterations for 1000 shifted Gaussian vectors in 50 dimensions, whose optimum has 20 non-zeros).
Both stay far below the cap in the tests.

Stopping rule. ``gap = w^T Q w - min_j (Q w)_j`` is the Frank-Wolfe duality gap of the problem
halved (the gradient is ``2 Q w``), so ``w^T Q w - f* <= 2 gap``. The solver stops when

    gap <= max(tol * w^T Q w, floor)     or     w^T Q w <= floor,
    floor = 8 * N * eps_float64 * max_i Q_ii,

``floor`` being the rounding error of one computed entry of ``Q w`` (a dot product of N terms
bounded by ``max_i Q_ii``): below it a gap, or the objective itself (``f* >= 0``), cannot be told
apart from zero. The first test is the relative gap; the others end the search when the minimum
is zero or at rounding level (e.g. a zero vector, or ``0`` in the convex hull), where a relative
gap can never be reached. An all-zero ``Q`` has ``floor = 0`` and stops at iteration 0. The
authors' released solver takes a fixed step of 0.999 near the optimum and therefore always runs
to its cap; this one does not (docs/algorithms.md section 3).

Numerics: float64 throughout on the CPU (the loop is O(N) scalar-driven work; a device round-trip
per step would cost more than the arithmetic). The returned weights are float64 on ``gram``'s
device, non-negative (every step keeps them so; a clipped face step sets the blocking weight to
exactly 0) and renormalised to sum to 1; ``info`` describes exactly these weights (the stop test is
confirmed on them with an exact ``Q w``).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

# floor = _ROUNDING_FACTOR * N * eps * max_diag; see the module docstring.
_ROUNDING_FACTOR = 8.0
# A face step is tried after this many pairwise steps without a change of support ...
_STABLE_STEPS_BEFORE_FACE_STEP = 8
# ... and at least support_size // _FACE_STEP_SPACING_DIVISOR pairwise steps after the previous
# face step, so its O(k^3) solve stays amortised against O(N) pairwise steps.
_FACE_STEP_SPACING_DIVISOR = 8
# Wolfe minor cycles per face step (each one drops a vertex when the affine minimiser is outside).
_MAX_MINOR_CYCLES = 4
# Recompute g = Q w exactly every max(N, this) steps to stop rounding drift of the O(N) updates.
_MIN_REFRESH_PERIOD = 100


def min_norm_weights(gram: torch.Tensor, *, tol: float = 1e-8, max_iter: int = 10000,
                     init: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, Any]]:
    """Minimise ``w^T Q w`` over the probability simplex for a symmetric PSD ``N x N`` ``gram``.

    ``init``: optional warm start, ``[N]`` non-negative finite weights with a positive sum
    (rescaled to sum 1), e.g. the previous round's weights when the momenta changed little; its
    zero entries start outside the support (Frank-Wolfe steps add them back as needed). Default:
    uniform weights.

    Returns ``(weights, info)``: ``weights`` is a float64 ``[N]`` tensor on ``gram``'s device,
    ``>= 0`` and summing to 1 up to rounding. ``info`` holds ``iterations`` (int, pairwise steps
    plus face steps), ``gap`` (float, final duality gap ``w^T Q w - min_j (Q w)_j``),
    ``objective`` (float, ``w^T Q w``), ``converged`` (bool, the stopping rule in the module
    docstring holds), ``threshold`` (float, the gap it was compared with), ``floor`` (float),
    ``face_steps`` (int) and ``support_size`` (int, number of non-zero weights).

    Raises ``ValueError`` for a non-square or non-2-D input, a non-floating dtype, NaN/Inf
    entries, a negative diagonal entry, or an asymmetric matrix (beyond rounding of its dtype);
    an empty matrix is rejected too.
    """
    if not isinstance(tol, (int, float)) or isinstance(tol, bool) or not tol >= 0:
        raise ValueError(f"min_norm_weights: tol must be a number >= 0, got {tol!r}")
    if not isinstance(max_iter, int) or isinstance(max_iter, bool) or max_iter < 0:
        raise ValueError(f"min_norm_weights: max_iter must be an int >= 0, got {max_iter!r}")
    q = _validated_gram_as_float64(gram)
    start = _validated_start(init, q.shape[0])
    weights, info = _solve(q, float(tol), int(max_iter), start)
    return torch.from_numpy(weights).to(gram.device), info


def _validated_gram_as_float64(gram: torch.Tensor) -> np.ndarray:
    """The gram as a symmetric float64 NumPy array, after checking it can be a Gram matrix."""
    if not isinstance(gram, torch.Tensor):
        raise ValueError(f"min_norm_weights: gram must be a torch.Tensor, got {type(gram).__name__}")
    if gram.ndim != 2 or gram.shape[0] != gram.shape[1]:
        raise ValueError(f"min_norm_weights: gram must be a square N x N matrix, got shape {tuple(gram.shape)}")
    if gram.shape[0] == 0:
        raise ValueError("min_norm_weights: gram is 0 x 0; the simplex needs at least one client")
    if not gram.is_floating_point():
        raise ValueError(f"min_norm_weights: gram must have a floating dtype, got {gram.dtype}")
    finite = torch.isfinite(gram)
    if not bool(finite.all()):
        bad = torch.nonzero(~finite)[0].tolist()
        raise ValueError(f"min_norm_weights: gram has NaN or Inf entries (first at {tuple(bad)}); "
                         "a Gram matrix must be finite")
    q = gram.detach().to(device="cpu", dtype=torch.float64).numpy().copy()
    diag = np.diag(q)
    if np.any(diag < 0):
        i = int(np.argmin(diag))
        raise ValueError(f"min_norm_weights: gram[{i}, {i}] = {diag[i]!r} < 0; a Gram matrix has "
                         "squared norms (>= 0) on its diagonal")
    scale = float(np.abs(q).max())
    asymmetry = float(np.abs(q - q.T).max())
    # A sanity check, not a precision claim: entries (i, j) and (j, i) computed separately (long
    # dot products in gram's dtype) differ by rounding, far below sqrt(eps) of that dtype.
    allowed = float(np.sqrt(torch.finfo(gram.dtype).eps)) * scale
    if asymmetry > allowed:
        raise ValueError(f"min_norm_weights: gram is not symmetric (max |Q - Q^T| = {asymmetry:.3e}, "
                         f"allowed {allowed:.3e} for {gram.dtype})")
    return 0.5 * (q + q.T)


def _validated_start(init: torch.Tensor | None, n: int) -> np.ndarray:
    """The starting weights: uniform, or ``init`` checked and rescaled to sum 1."""
    if init is None:
        return np.full(n, 1.0 / n)
    if not isinstance(init, torch.Tensor) or init.shape != (n,) or not init.is_floating_point():
        shape = tuple(init.shape) if isinstance(init, torch.Tensor) else type(init).__name__
        raise ValueError(f"min_norm_weights: init must be a floating tensor of shape ({n},), got {shape}")
    start = init.detach().to(device="cpu", dtype=torch.float64).numpy().copy()
    if not np.all(np.isfinite(start)) or np.any(start < 0) or not start.sum() > 0:
        raise ValueError("min_norm_weights: init must hold finite weights >= 0 with a positive sum")
    return start / start.sum()


def _solve(q: np.ndarray, tol: float, max_iter: int,
           start: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
    n = q.shape[0]
    floor = _ROUNDING_FACTOR * n * np.finfo(np.float64).eps * float(np.max(np.diag(q)))
    w = start
    g = q @ w
    refresh_period = max(n, _MIN_REFRESH_PERIOD)
    iterations = 0
    face_steps = 0
    steps_since_refresh = 0
    steps_with_same_support = 0
    last_face_step = -(1 << 62)

    def stop_test() -> tuple[bool, float, float, float, int]:
        objective = float(w @ g)
        s = int(np.argmin(g))
        gap = objective - float(g[s])
        threshold = max(tol * objective, floor)
        return (gap <= threshold or objective <= floor), objective, gap, threshold, s

    while True:
        done, objective, gap, threshold, s = stop_test()
        if done or iterations >= max_iter:
            # Confirm on the weights to be returned (renormalised) with an exact Q w, so that drift
            # in the O(N) updates cannot fake convergence and info describes the returned weights.
            w = w / w.sum()
            g = q @ w
            done, objective, gap, threshold, s = stop_test()
            if done or iterations >= max_iter:
                break

        support_size = int(np.count_nonzero(w))
        face_due = (steps_with_same_support >= _STABLE_STEPS_BEFORE_FACE_STEP
                    and iterations - last_face_step >= max(_STABLE_STEPS_BEFORE_FACE_STEP,
                                                           support_size // _FACE_STEP_SPACING_DIVISOR))
        if face_due and support_size > 1:
            last_face_step = iterations
            steps_with_same_support = 0
            moved = False
            for _ in range(_MAX_MINOR_CYCLES):
                if iterations >= max_iter:
                    break
                step = _face_step(q, w, g)
                if step is None:
                    break
                iterations += 1
                face_steps += 1
                moved = True
                w, g, hit_boundary = step
                if not hit_boundary or np.count_nonzero(w) <= 1:
                    break
            if moved:
                continue
            # The face step made no progress (already optimal on this face): take a pairwise step.

        step = _pairwise_step(q, w, g, s)
        if step is None:
            # No feasible descent direction at working precision: w is optimal to rounding.
            w = w / w.sum()
            g = q @ w
            done, objective, gap, threshold, s = stop_test()
            break
        w, g, support_changed = step
        iterations += 1
        steps_with_same_support = 0 if support_changed else steps_with_same_support + 1
        steps_since_refresh += 1
        if steps_since_refresh >= refresh_period:
            steps_since_refresh = 0
            w = w / w.sum()
            g = q @ w

    info = {
        "iterations": int(iterations),
        "gap": float(gap),
        # Rounding can make the PSD form a hair negative; the true value is >= 0.
        "objective": max(float(objective), 0.0),
        "converged": bool(done),
        "threshold": float(threshold),
        "floor": float(floor),
        "face_steps": int(face_steps),
        "support_size": int(np.count_nonzero(w)),
    }
    return w, info


def _pairwise_step(q: np.ndarray, w: np.ndarray, g: np.ndarray,
                   s: int) -> tuple[np.ndarray, np.ndarray, bool] | None:
    """Move weight from the away vertex to the FW vertex ``s`` with exact line search.

    Returns ``(w, g, support_changed)`` or ``None`` when no weight can move (``a == s`` or no
    descent at working precision).
    """
    away_scores = np.where(w > 0, g, -np.inf)
    a = int(np.argmax(away_scores))
    decrease = float(g[a] - g[s])          # -(directional derivative)/2 along e_s - e_a
    if a == s or not decrease > 0:
        return None
    curvature = float(q[s, s] + q[a, a] - 2.0 * q[s, a])   # ||m_s - m_a||^2
    max_step = float(w[a])
    step = max_step if curvature <= 0 else min(decrease / curvature, max_step)
    if not step > 0:
        return None
    added = w[s] == 0
    w = w.copy()
    w[s] += step
    dropped = step >= max_step
    if dropped:
        w[a] = 0.0      # exactly zero, so the away vertex leaves the support
    else:
        w[a] -= step
    g = g + step * (q[s] - q[a])
    return w, g, bool(added or dropped)


def _face_step(q: np.ndarray, w: np.ndarray,
               g: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool] | None:
    """Exact line search from ``w`` towards the affine minimiser of the current face.

    Returns ``(w, g, hit_boundary)`` or ``None`` when the direction is not a descent direction
    (``w`` already minimises the quadratic on its face, to working precision).
    """
    support = np.flatnonzero(w > 0)
    target = _affine_minimiser(q[np.ix_(support, support)])
    if target is None:
        return None
    direction = target - w[support]
    direction -= direction.mean()           # stay on sum(w) = 1 despite rounding in the solve
    q_direction = q[:, support] @ direction
    decrease = -float(direction @ g[support])
    if not decrease > 0:
        return None
    curvature = float(direction @ q_direction[support])
    shrinking = direction < 0
    if not shrinking.any():
        return None
    ratios = w[support][shrinking] / -direction[shrinking]
    blocking = int(np.argmin(ratios))
    max_step = float(ratios[blocking])
    step = max_step if curvature <= 0 else min(decrease / curvature, max_step)
    if not step > 0:
        return None
    w = w.copy()
    w[support] += step * direction
    hit_boundary = step >= max_step
    if hit_boundary:
        w[support[shrinking][blocking]] = 0.0
    w[w < 0] = 0.0
    g = g + step * q_direction
    return w, g, bool(hit_boundary)


def _affine_minimiser(q_face: np.ndarray) -> np.ndarray | None:
    """Approximately ``argmin w^T Q w`` subject to ``sum(w) = 1`` (no sign constraint).

    ``w = (Q + delta I)^{-1} 1 / (1^T (Q + delta I)^{-1} 1)`` by Cholesky. The ridge ``delta``
    starts at the rounding level of ``Q`` (``8 k eps max_i Q_ii``), which makes the factorisation
    succeed for the singular ``Q`` of duplicated vectors or of more vectors than dimensions and
    changes the target of a well-conditioned ``Q`` only at rounding level; it grows if the
    factorisation still fails. The target then minimises ``w^T Q w + delta ||w||^2`` on the affine
    hull, within ``delta / k`` of the face minimum: below the stopping floor. The caller
    line-searches the true objective towards it, so an inexact target only slows the search, never
    misleads it. Returns ``None`` if no factorisation succeeds.
    """
    k = q_face.shape[0]
    face = torch.from_numpy(np.ascontiguousarray(q_face))
    ones = torch.ones(k, 1, dtype=torch.float64)
    rounding_level = _ROUNDING_FACTOR * k * np.finfo(np.float64).eps * max(float(np.max(np.diag(q_face))), 0.0)
    ridges = [rounding_level * 100.0 ** i for i in range(4)] if rounding_level > 0 else [0.0]
    for ridge in ridges:
        shifted = face.clone()
        shifted.diagonal().add_(ridge)
        factor, status = torch.linalg.cholesky_ex(shifted)
        if int(status) != 0:
            continue
        y = torch.cholesky_solve(ones, factor)[:, 0].numpy()
        total = float(y.sum())
        if np.all(np.isfinite(y)) and total > 0:
            return y / total
    return None
