"""FedAWARE's direction ``d`` as a building block: per-client momenta, their Gram matrix, the
min-norm weights and the step, shared by FedAWARE (:mod:`fedhet.algorithms.fedaware`, whose
docstring states the rule) and the AWARE transform (:mod:`fedhet.server.aware`).

Per round, with participants ``S`` and ``g_i = x - y_i`` (docs/algorithms.md section 1)::

    m_i <- (1 - alpha) m_i + alpha g_i   for i in S          (MomentumDirection.observe)
    lambda = argmin_{lambda in simplex} ||sum_i lambda_i m_i||^2    (MomentumDirection.solve)
    d = sum_i lambda_i m_i                                       (MomentumDirection.combine)

over the clients seen so far whose momentum is non-zero (``m_i / ||m_i||`` with ``normalize``).
Two kernels compute these numbers, chosen by the ``kernel`` setting (``server.kernel`` of FedAWARE,
``server.aware_kernel`` of AWARE), as torch.optim keeps ``_single_tensor_adam`` beside
``_multi_tensor_adam``:

- ``"reference"`` (:func:`reference_momenta`, :func:`reference_gram`, :func:`reference_weights`,
  :func:`reference_step`): the three lines in dense float64 torch, ``Q = M M^T`` over the whole
  table every round and the simplex problem solved by plain projected gradient. ``O(N^2 d)`` a
  round; for checking.
- ``"fast"`` (the default): the same numbers without the dense work.

  - **Momenta** live in a :class:`~fedhet.core.store.ClientStore` made with
    ``context.make_store(store_name, subset=...)``: the run's storage dtype (float32, bfloat16,
    float16), device and memory mapping, checkpointed with the run. The update is computed in the
    run's compute dtype and rounded once when stored (bitwise the reference's momenta);
    everything downstream (Gram matrix, ``d``) uses the values *as stored*, so a bfloat16 store
    is self-consistent.
  - **Gram matrix** ``Q_ij = <m_i, m_j>`` is kept in the state (``[N, N]``, float64, CPU) and only
    the rows and columns of this round's clients are recomputed
    (:func:`fedhet.server.gram.gram_update`, blocked and threaded), ``O(|S| N d)`` per round.
    Entries are dot products accumulated in the run's compute dtype (float32 in float32 runs,
    which keeps the product a single BLAS call over a view of a float32 table; float64 in float64
    runs), stored in float64.
  - **Weights**: :func:`fedhet.server.min_norm.min_norm_weights` (pairwise Frank-Wolfe with face
    steps, exact line search and a duality-gap stopping rule) on ``N x N`` only.
  - **Step**: :func:`fedhet.server.table_kernels.weighted_row_sum` (threaded, skipping rows whose
    weight is zero) in the compute dtype.

Clients never seen have no momentum (``m_i = 0`` would make the minimum norm zero and stop
training), so they are left out of the simplex (docs/algorithms.md section 3); so is a seen client
whose stored momentum is exactly zero. With no such client yet there is no ``d``. With
``momentum_layers`` the store keeps only those coordinates; ``d`` there is the combination above and
the other coordinates follow the FedAvg aggregate ``sum_{i in S} p_i g_i``.

Metrics of :meth:`MomentumDirection.combine`: ``aware_weight_entropy`` (``-sum lambda_i ln lambda_i``,
nats), ``aware_num_nonzero`` (clients with ``lambda_i > 0``), ``aware_num_seen`` (clients in the
simplex), ``solver_iterations``, ``solver_gap`` (the final Frank-Wolfe duality gap).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple, Optional

import torch

from fedhet.core.cohort import Cohort
from fedhet.core.options import ConfigError
from fedhet.core.store import ClientStore
from fedhet.server.aware_options import KERNELS, AwareOptions
from fedhet.server.base import ServerContext, data_size_weights
from fedhet.server.gram import gram_update, normalized_gram, submatrix
from fedhet.server.min_norm import min_norm_weights
from fedhet.server.table_kernels import weighted_row_sum

# Upcast at most this many bytes of momenta at a time when forming d (bounded memory for any N d).
_BLOCK_BYTES = 64 << 20


@dataclasses.dataclass(frozen=True)
class DirectionSettings(AwareOptions):
    """How :class:`MomentumDirection` computes ``d``: the :class:`AwareOptions` of FedAWARE or of
    the AWARE extension, the NA ablation's ``uniform_weights``, the store's name, and the prefix
    that names the options in error messages."""

    uniform_weights: bool = False
    store_name: str = "fedaware_momentum"
    option_prefix: str = "server."

    @classmethod
    def of(cls, options: AwareOptions, **values) -> "DirectionSettings":
        return cls(**{f.name: getattr(options, f.name) for f in dataclasses.fields(AwareOptions)}, **values)


class DirectionState(NamedTuple):
    """:class:`MomentumDirection`'s state: the momenta ``m_i`` (a per-client store) and their Gram
    matrix (float64 ``[N, N]``, CPU)."""

    momenta: ClientStore
    gram: torch.Tensor


class Weights(NamedTuple):
    """What :meth:`MomentumDirection.solve` returns: the clients in the simplex (int64 ids,
    ascending), ``lambda`` over them and ``||m_i||`` (float64, CPU), and the solver's info
    (``iterations``, ``gap``). Empty tensors when no client qualifies."""

    ids: torch.Tensor
    weights: torch.Tensor
    norms: torch.Tensor
    info: dict[str, Any]


class MomentumDirection:
    """FedAWARE's per-client momenta, their Gram matrix and the direction ``d`` (module docstring).

    Holds no state itself (only its settings); its state is a :class:`DirectionState`. The store is
    written in place by :meth:`observe` (it is the state's table) and the Gram matrix replaced by a
    new tensor, so ``observe`` consumes the state it is given: use only the state it returns
    (docs/design.md, "State").
    """

    def __init__(self, settings: DirectionSettings):
        if settings.kernel not in KERNELS:
            raise ValueError(f"{settings.store_name}: kernel must be one of {', '.join(KERNELS)}, "
                             f"got {settings.kernel!r}")
        self.settings = settings
        self.reference = settings.kernel == "reference"

    # --- state ----------------------------------------------------------------------------------
    def init(self, params: torch.Tensor, context: ServerContext) -> DirectionState:
        subset = self._subset(context)
        store = context.make_store(self.settings.store_name, subset=subset)
        gram = torch.zeros(context.num_clients, context.num_clients, dtype=torch.float64)
        return DirectionState(momenta=store, gram=gram)

    def _subset(self, context: ServerContext) -> Optional[torch.Tensor]:
        layers = tuple(self.settings.momentum_layers)
        if not layers:
            return None
        key = f"{self.settings.option_prefix}momentum_layers"
        if context.param_slices is None or not context.param_names:
            raise ConfigError(key, list(layers), "this run has no parameter names to select layers by; "
                                                 "leave it empty")
        unknown = [name for name in layers if name not in context.param_names]
        if unknown or len(set(layers)) != len(layers):
            problem = f"unknown names {unknown}" if unknown else "a name is repeated"
            raise ConfigError(key, list(layers), f"{problem}; allowed: the model's parameter names "
                                                 f"{', '.join(context.param_names)}")
        return torch.sort(context.param_slices(list(layers))).values

    # --- the three lines ------------------------------------------------------------------------
    def observe(self, state: DirectionState, cohort: Cohort, context: ServerContext) -> DirectionState:
        """``m_i <- (1 - alpha) m_i + alpha g_i`` for the cohort's clients; their Gram rows recomputed."""
        if len(cohort) == 0:
            return state
        ids = cohort.client_ids.to(torch.int64)
        if torch.unique(ids).numel() != ids.numel():
            raise ValueError(f"{self.settings.store_name}: the cohort lists a client twice "
                             f"({ids.tolist()}); one upload per client and round is expected")
        if self.reference:
            reference_momenta(state.momenta, ids, -cohort.deltas, self.settings.alpha)
            return state._replace(gram=reference_gram(state.momenta))
        return _fast_observe(state, ids, cohort, self.settings.alpha)

    def solve(self, state: DirectionState) -> Weights:
        """``lambda`` over the clients in the simplex (seen, non-zero momentum): :class:`Weights`."""
        store: ClientStore = state.momenta
        gram = state.gram.to("cpu")
        ids = torch.nonzero(store.written.to("cpu") & (gram.diagonal() > 0)).flatten()
        if ids.numel() == 0:
            empty = torch.zeros(0, dtype=torch.float64)
            return Weights(ids, empty, empty, {"iterations": 0, "gap": math.nan})
        q = submatrix(gram, ids)
        norms = q.diagonal().sqrt()
        if self.settings.normalize:
            q = normalized_gram(q)
        if self.settings.uniform_weights:
            weights = torch.full((ids.numel(),), 1.0 / ids.numel(), dtype=torch.float64)
            return Weights(ids, weights, norms, {"iterations": 0, "gap": _duality_gap(q, weights)})
        solve = reference_weights if self.reference else min_norm_weights
        weights, info = solve(q, tol=self.settings.solver_tol, max_iter=self.settings.solver_max_iter)
        return Weights(ids, weights.to("cpu"), norms, info)

    def combine(self, state: DirectionState, solved: Weights,
                cohort: Cohort) -> tuple[Optional[torch.Tensor], dict[str, float]]:
        """``(d, metrics)``: ``d = sum_i lambda_i m_i`` (over ``||m_i||`` with ``normalize``),
        full-length in the cohort's dtype and device, or ``None`` when no client with a non-zero
        momentum has been seen yet."""
        store: ClientStore = state.momenta
        ids, weights, norms, info = solved
        if ids.numel() == 0:
            return None, {"aware_num_seen": 0.0}
        coefficients = weights / norms if self.settings.normalize else weights
        stored_direction = (reference_step(store, ids, coefficients) if self.reference
                            else _weighted_rows(store, ids, coefficients))
        dtype, device = cohort.deltas.dtype, cohort.deltas.device
        if store.subset is None:
            direction = stored_direction.to(device=device, dtype=dtype)
        else:
            # Coordinates without momenta follow FedAvg (module docstring, momentum_layers).
            direction = (data_size_weights(cohort) @ cohort.pseudo_gradients if len(cohort) > 0
                         else torch.zeros(store.full_dim, dtype=dtype, device=device))
            direction = direction.index_copy(0, store.subset.to(device),
                                             stored_direction.to(device=device, dtype=dtype))
        metrics = {
            "aware_weight_entropy": weight_entropy(weights),
            "aware_num_nonzero": float(int((weights > 0).sum())),
            "aware_num_seen": float(ids.numel()),
            "solver_iterations": float(info["iterations"]),
            "solver_gap": float(info["gap"]),
        }
        return direction, metrics

    def direction(self, state: DirectionState, cohort: Cohort) -> tuple[Optional[torch.Tensor], dict[str, float]]:
        """:meth:`combine` of :meth:`solve`: ``d`` of the current momenta and its metrics."""
        return self.combine(state, self.solve(state), cohort)

    def weights(self, state: DirectionState) -> torch.Tensor:
        """The ``[N]`` float64 weights ``lambda`` of the current momenta, zero outside the simplex
        (for inspection and tests; solves again)."""
        store: ClientStore = state.momenta
        solved = self.solve(state)
        full = torch.zeros(store.num_clients, dtype=torch.float64)
        full[solved.ids] = solved.weights
        return full


def weight_entropy(weights: torch.Tensor) -> float:
    """``-sum w ln w`` over the positive entries (nats); ``ln(k)`` for uniform weights on k clients."""
    positive = weights[weights > 0].to(torch.float64)
    return float(-(positive * positive.log()).sum()) if positive.numel() else math.nan


# --- reference kernel: the paper's three lines in dense torch (kernel = "reference") ----------------

def reference_momenta(store: ClientStore, ids: torch.Tensor, g: torch.Tensor, alpha: float) -> None:
    """``m_i <- (1 - alpha) m_i + alpha g_i`` for the rows ``ids`` of ``g`` (AISTATS 2025, Eq. 3)."""
    g = store.project(g)
    m = store.read(ids, device=g.device).to(g.dtype)
    store.write(ids, (1 - alpha) * m + alpha * g)


def reference_gram(store: ClientStore) -> torch.Tensor:
    """``Q = M M^T`` of the whole table as stored, in float64 on the CPU."""
    m = store.table.to(device="cpu", dtype=torch.float64)
    return m @ m.T


def reference_weights(q: torch.Tensor, *, tol: float, max_iter: int) -> tuple[torch.Tensor, dict[str, Any]]:
    """``lambda = argmin_{simplex} lambda^T Q lambda`` (Eq. 2) by projected gradient with step ``1/L``,
    from uniform weights, until the Frank-Wolfe gap ``lambda^T Q lambda - min_j (Q lambda)_j`` is at
    most ``max(tol lambda^T Q lambda, 8 N eps max_i Q_ii)`` (the stopping rule of
    :func:`fedhet.server.min_norm.min_norm_weights`) or ``max_iter`` steps have run."""
    q = q.to(torch.float64)
    n = q.shape[0]
    largest = float(torch.linalg.eigvalsh(q).max())   # the gradient 2 Q w is 2 largest-Lipschitz
    floor = 8 * n * torch.finfo(torch.float64).eps * float(q.diagonal().max())
    w = torch.full((n,), 1.0 / n, dtype=torch.float64)
    for iteration in range(max_iter + 1):
        qw = q @ w
        gap = float(w @ qw - qw.min())
        if gap <= max(tol * float(w @ qw), floor) or largest <= 0 or iteration == max_iter:
            break
        w = _project_onto_simplex(w - qw / largest)          # w - (1/L) 2 Q w
    return w, {"iterations": iteration, "gap": gap}


def reference_step(store: ClientStore, ids: torch.Tensor, coefficients: torch.Tensor) -> torch.Tensor:
    """``d = sum_k coefficients[k] m_{ids[k]}`` over the stored coordinates, in float64."""
    m = store.table.index_select(0, ids.to(store.table.device)).to(torch.float64)
    return coefficients.to(device=m.device, dtype=torch.float64) @ m


def _project_onto_simplex(v: torch.Tensor) -> torch.Tensor:
    """Euclidean projection onto ``{w >= 0, sum w = 1}`` (sort and threshold; Duchi et al., ICML 2008)."""
    u = torch.sort(v, descending=True).values
    cumulative = torch.cumsum(u, 0) - 1
    k = torch.arange(1, v.numel() + 1, dtype=v.dtype)
    rho = int(torch.nonzero(u - cumulative / k > 0).max())
    return (v - cumulative[rho] / (rho + 1)).clamp_min(0)


# --- fast kernel: blocked, threaded, incremental (kernel = "fast") ----------------------------------

def _fast_observe(state: DirectionState, ids: torch.Tensor, cohort: Cohort, alpha: float) -> DirectionState:
    """The momentum update in place and the Gram rows of ``ids`` recomputed (module docstring)."""
    store: ClientStore = state.momenta
    # Row k of the cohort is client ids[k]: momenta are read and written by the same ids tensor,
    # so no reordering can pair a client with another client's update.
    # alpha g = alpha (-delta) = (-alpha) delta exactly (negation is exact), in one fresh [K, d]
    # instead of two passes (the negated copy, then the scaling).
    updates = torch.mul(store.project(cohort.deltas), -alpha)
    previous = store.read(ids, device=updates.device).to(updates.dtype)   # a fresh copy
    # (1 - alpha) m + alpha g, rounded exactly as the out-of-place expression but computed in
    # place on the fresh copies: every new [K, d] temporary is fresh memory to fault in, which
    # dominated the step at K = 100, d = 1e6 (figures: benchmarks/README.md, "Server side").
    momenta = previous.mul_(1.0 - alpha).add_(updates)
    del updates
    store.write(ids, momenta)
    # Block sizes: gram_update's defaults (all changed rows in one block, so the table is streamed
    # once per round; fedhet.server.gram, "Memory and traffic").
    accumulate = _accumulate_dtype(store)
    # The rows just written, when they are exactly what the table holds (no rounding to a 16-bit
    # store), spare the Gram update gathering them again; it wants them in sorted id order.
    changed_rows = None
    if store.storage_dtype == accumulate and momenta.dtype == accumulate and momenta.device == store.table.device:
        order = torch.argsort(ids)
        changed_rows = momenta if bool((order == torch.arange(ids.numel())).all()) else momenta[order]
    gram = gram_update(state.gram.to("cpu"), _row_source(store), ids, accumulate_dtype=accumulate,
                       threads=store.options.threads, changed_rows=changed_rows)
    return state._replace(gram=gram)


def _accumulate_dtype(store: ClientStore) -> torch.dtype:
    return torch.float64 if store.compute_dtype == torch.float64 else torch.float32


def _row_source(store: ClientStore):
    """What :func:`gram_update` reads the momenta from: the table itself when it is already in the
    accumulation dtype (contiguous blocks are then views, no copies), else a getter that upcasts
    the requested rows."""
    if store.storage_dtype == _accumulate_dtype(store):
        return store.table
    return lambda ids: store.read(ids).to(_accumulate_dtype(store))


def _weighted_rows(store: ClientStore, ids: torch.Tensor, coefficients: torch.Tensor) -> torch.Tensor:
    """``sum_k coefficients[k] m_{ids[k]}`` over the stored coordinates, in the compute dtype.

    The table in contiguous blocks of rows of at most ``_BLOCK_BYTES`` upcast
    (:meth:`ClientStore.row_blocks`), one matrix-vector product per block with a non-zero
    coefficient, summed in block order; :func:`fedhet.server.table_kernels.weighted_row_sum`
    computes exactly these numbers, skipping all-zero blocks (and, in a 16-bit store, zero-coefficient
    rows), on the store's threads.
    """
    dense = torch.zeros(store.num_clients, dtype=torch.float64)
    dense[ids] = coefficients.to(torch.float64)
    rows_per_block = next(iter(store.row_blocks(_BLOCK_BYTES)), (0, 1))[1]
    return weighted_row_sum(store.table, dense, compute_dtype=store.compute_dtype,
                            rows_per_block=rows_per_block, threads=store.options.threads)


def _duality_gap(q: torch.Tensor, weights: torch.Tensor) -> float:
    """Frank-Wolfe gap ``w^T Q w - min_j (Q w)_j`` of ``weights`` (how far from the min-norm point)."""
    gradient = q @ weights
    return float(weights @ gradient - gradient.min())
