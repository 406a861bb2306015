"""The aggregation and server-optimisation stages, and their composition into a server method.

Conventions (docs/algorithms.md section 1): clients upload ``delta_i = y_i - x``; the server works with
pseudo-gradients ``g_i = -delta_i``. An **aggregator** turns a cohort into one pseudo-gradient ``G``;
a **server optimiser** turns ``G`` into a step ``u``; the new model is ``x - u``. Both are immutable
objects with explicit state (``init`` / ``aggregate`` / ``update`` take state and return new state),
as in optax; composition, not inheritance, builds the named methods: FedYogi = data-size aggregation
+ Yogi optimiser; FedAWARE = min-norm aggregation of momenta + SGD. An optional **step transform**
after the optimiser replaces ``u`` (the AWARE extension: ``u`` projected onto FedAWARE's direction);
:func:`compose` builds every named method and applies the options common to all of them.

A **server method** is anything with ``init(params, context) -> state`` and
``step(state, params, cohort, context) -> (new_params, state, metrics)``; :class:`ComposedServer` is
the usual one.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, Protocol

import torch

from fedhet.core.cohort import Cohort
from fedhet.core.options import ConfigError, option
from fedhet.core.store import ClientStore


@dataclasses.dataclass(frozen=True)
class ServerContext:
    """What the server may know in a round. ``make_store(name, subset=None)`` creates a per-client
    ``[N, d]`` store with the run's storage settings (dtype, device, memory mapping)."""

    round_index: int
    num_clients: int
    seed: int
    client_sizes: torch.Tensor                          # [N] examples per client
    make_store: Callable[..., ClientStore]
    participation_probabilities: Optional[torch.Tensor] = None   # known p_n, when the process has them
    solver: Any = None                                  # the local solver (FedNova asks it for a_i)
    client_learning_rate: float = 0.0                   # eta_l the clients used this round (after decay)
    param_names: tuple[str, ...] = ()                   # for per-layer options (store subsets)
    param_slices: Callable[..., torch.Tensor] | None = None
    # participation.explore is on (FedAWARE's exploration sweep): FedAWARE then steps like FedAvg
    # until every client has been seen, as the authors' code does.
    participation_explore: bool = False


class Aggregator(Protocol):
    def init(self, params: torch.Tensor, context: ServerContext) -> dict[str, Any]: ...

    def aggregate(self, state: dict[str, Any], cohort: Cohort,
                  context: ServerContext) -> tuple[Optional[torch.Tensor], dict[str, Any], dict[str, float]]:
        """``(G, new_state, metrics)``; ``G`` is None when there is nothing to apply this round."""
        ...


class ServerOptimizer(Protocol):
    def init(self, params: torch.Tensor) -> dict[str, Any]: ...

    def update(self, state: dict[str, Any], pseudo_gradient: torch.Tensor,
               context: ServerContext) -> tuple[torch.Tensor, dict[str, Any]]:
        """``(u, new_state)``: the step, applied as ``x <- x - u``."""
        ...


class StepTransform(Protocol):
    """An optional stage after the optimiser that replaces its step ``u`` (e.g. AWARE's projection).

    ``observe`` sees every round's cohort (also rounds in which the aggregator gives no ``G``);
    ``apply`` runs only when there is a step to transform.
    """

    def init(self, params: torch.Tensor, context: ServerContext) -> dict[str, Any]: ...

    def observe(self, state: dict[str, Any], cohort: Cohort, context: ServerContext) -> dict[str, Any]: ...

    def apply(self, state: dict[str, Any], update: torch.Tensor, cohort: Cohort,
              context: ServerContext) -> tuple[torch.Tensor, dict[str, Any], dict[str, float]]:
        """``(new_update, new_state, metrics)``."""
        ...


@dataclasses.dataclass(frozen=True)
class ServerOptions:
    """Options shared by every server method (``[server]`` section).

    Method-specific options subclass this. The ``aware*`` options select and tune the AWARE
    extension (FedAWARE, AISTATS 2025, Proposition 3.1; :mod:`fedhet.server.aware`), which
    :func:`compose` applies to any method built with it.
    """

    learning_rate: float = option(1.0, gt=0, symbol="eta_g", help="server (global) learning rate")
    aware: bool = option(False, help="AWARE extension (FedAWARE, AISTATS 2025, Proposition 3.1): keep "
                                     "FedAWARE's per-client momenta alongside this method and replace its "
                                     "step u by the projection (<u, d>/<d, d>) d onto FedAWARE's direction d")
    aware_alpha: float = option(0.5, gt=0, le=1, symbol="alpha",
                                help="AWARE momentum weight of the new update: m_i <- (1 - alpha) m_i + alpha g_i "
                                     "(AISTATS Eq. 3)")
    aware_normalize: bool = option(True, help="AWARE: solve for the weights on unit-normalised momenta and "
                                              "build d from them (the authors' code); false = raw momenta "
                                              "(the paper's Eq. 2)")
    aware_solver_tol: float = option(1e-8, ge=0, help="AWARE: relative Frank-Wolfe duality-gap tolerance "
                                                      "of the min-norm solve")
    aware_solver_max_iter: int = option(10000, ge=1, help="AWARE: iteration cap of the min-norm solve")
    aware_momentum_layers: tuple[str, ...] = option(
        default_factory=tuple,
        help="AWARE: parameter names whose coordinates the momenta keep (empty = all); see "
             "server.momentum_layers of fedaware for the rule on the other coordinates")


def data_size_weights(cohort: Cohort) -> torch.Tensor:
    """``p_i = n_i / sum_{j in S} n_j`` (docs/algorithms.md section 1), on the deltas' device and in their
    dtype (the sizes are kept on the CPU; on a GPU run ``p @ deltas`` needs both on the GPU)."""
    sizes = cohort.num_examples.to(device=cohort.deltas.device, dtype=cohort.deltas.dtype)
    return sizes / sizes.sum()


class WeightedAverage:
    """``G = sum_{i in S} p_i g_i`` with data-size weights (FedAvg, McMahan et al. 2017)."""

    def init(self, params: torch.Tensor, context: ServerContext) -> dict[str, Any]:
        return {}

    def aggregate(self, state, cohort, context):
        if len(cohort) == 0:
            return None, state, {}
        # -(p @ deltas) is bitwise p @ (-deltas) (negation commutes with rounding) without the
        # negated [K, d] copy.
        return -(data_size_weights(cohort) @ cohort.deltas), state, {}


class ServerSGD:
    """``u = eta_g G``: FedAvg's server step (server SGD with learning rate eta_g)."""

    def __init__(self, learning_rate: float):
        self.learning_rate = learning_rate

    def init(self, params: torch.Tensor) -> dict[str, Any]:
        return {}

    def update(self, state, pseudo_gradient, context):
        return self.learning_rate * pseudo_gradient, state


class ComposedServer:
    """Aggregator, then optimiser: ``G = aggregate(cohort)``, ``u = optimiser(G)``, ``x <- x - u``;
    with an optional :class:`StepTransform` between ``u`` and the step (``u <- transform(u)``).

    A round whose aggregator returns no ``G`` (e.g. nobody participated) leaves ``x`` and the
    optimiser state unchanged. Reports ``pseudo_grad_norm = ||G||`` and ``update_norm = ||u||``
    (the step actually taken, after the transform).
    """

    def __init__(self, aggregator: Aggregator, optimizer: ServerOptimizer,
                 transform: Optional[StepTransform] = None):
        self.aggregator = aggregator
        self.optimizer = optimizer
        self.transform = transform

    def init(self, params: torch.Tensor, context: ServerContext) -> dict[str, Any]:
        state = {"aggregator": self.aggregator.init(params, context), "optimizer": self.optimizer.init(params)}
        if self.transform is not None:
            state["transform"] = self.transform.init(params, context)
        return state

    def step(self, state, params, cohort, context):
        pseudo_gradient, agg_state, metrics = self.aggregator.aggregate(state["aggregator"], cohort, context)
        new_state = dict(state, aggregator=agg_state)
        if self.transform is not None:
            new_state["transform"] = self.transform.observe(state["transform"], cohort, context)
        if pseudo_gradient is None:
            return params, new_state, metrics
        update, opt_state = self.optimizer.update(state["optimizer"], pseudo_gradient, context)
        new_state["optimizer"] = opt_state
        metrics = dict(metrics)
        if self.transform is not None:
            update, new_state["transform"], transform_metrics = self.transform.apply(
                new_state["transform"], update, cohort, context)
            metrics.update(transform_metrics)
        metrics["pseudo_grad_norm"] = float(torch.linalg.vector_norm(pseudo_gradient))
        metrics["update_norm"] = float(torch.linalg.vector_norm(update))
        return params - update, new_state, metrics


def compose(aggregator: Aggregator, optimizer: ServerOptimizer, options: ServerOptions, *,
            aware_incompatible: Optional[str] = None) -> ComposedServer:
    """The one way named server methods are built from an aggregator and an optimiser.

    Options common to every server method (those of :class:`ServerOptions`) are applied here, so
    they work for every method with no per-method code:

    - ``options.aware``: the AWARE extension (:func:`fedhet.server.aware.aware_transform`) becomes
      the :class:`StepTransform` of the composed server, so the optimiser's final step ``u``
      (after any momentum or adaptive transform) is replaced by its projection onto FedAWARE's
      direction ``d``.

    ``aware_incompatible``: a method whose server update is not a gradient step
    ``x <- x - eta_g dtilde`` (the premise of Proposition 3.1; e.g. FedDyn, whose server sets
    ``x <- mean_S w_i - h/alpha``) passes the reason here; ``server.aware = true`` is then refused
    with a :class:`~fedhet.core.options.ConfigError` quoting it, instead of being applied where
    it has no meaning.
    """
    transform: Optional[StepTransform] = None
    if options.aware:
        if aware_incompatible is not None:
            raise ConfigError("server.aware", True,
                              "the AWARE extension projects a gradient step x <- x - eta_g d (FedAWARE, "
                              f"Proposition 3.1), but {aware_incompatible}; allowed: false")
        from fedhet.server.aware import aware_transform   # aware builds on this module

        transform = aware_transform(options)
    return ComposedServer(aggregator, optimizer, transform)
