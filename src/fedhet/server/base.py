"""The aggregation and server-optimisation stages, and their composition into a server method.

Conventions (docs/algorithms.md section 1): clients upload ``delta_i = y_i - x``; the server works with
pseudo-gradients ``g_i = -delta_i``. An **aggregator** turns a cohort into one pseudo-gradient ``G``;
a **server optimiser** turns ``G`` into a step ``u``; the new model is ``x - u``. Both are immutable
objects with explicit state (``init`` / ``aggregate`` / ``update`` take state and return new state),
as in optax; composition, not inheritance, builds the named methods: FedYogi = data-size aggregation
+ Yogi optimiser; FedAWARE = min-norm aggregation of momenta + SGD. Optional **step transforms**
after the optimiser replace ``u`` (the AWARE extension: ``u`` projected onto FedAWARE's direction);
:func:`compose` puts the stages together and knows no method by name
(:func:`fedhet.server.methods.server_method` applies the options common to every named method).

States are typed (a NamedTuple per stage, :class:`ServerState` for a composed method) and hold
tensors, numbers and per-client stores; a state holding a :class:`~fedhet.core.store.ClientStore` is
*consumed* by the call that takes it (the store is written in place), so callers use only the
returned state (docs/design.md, "State").

A **server method** (:class:`ServerMethod`) is anything with ``init(params, context) -> state``,
``broadcast(state) -> {name: tensor}`` (what clients receive; server-side state a local solver
needs lives here, docs/design.md "Server-side state") and
``step(state, params, cohort, context) -> (new_params, state, metrics)``; :class:`ComposedServer` is
the usual one.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Optional, Protocol, Sequence, runtime_checkable

import torch

from fedhet.core.cohort import Cohort
from fedhet.core.component_output import check_tensor_output
from fedhet.core.options import option, refuse_inactive
from fedhet.core.store import ClientStore
from fedhet.server.aware_options import AwareOptions, aware_field


@dataclasses.dataclass(frozen=True)
class ServerContext:
    """What the server may know in a round. ``make_store(name, subset=None)`` creates a per-client
    ``[N, d]`` store with the run's storage settings (dtype, device, memory mapping)."""

    round_index: int
    num_clients: int
    make_store: Callable[..., ClientStore]
    participation_probabilities: Optional[torch.Tensor] = None   # known p_n, when the process has them
    param_names: tuple[str, ...] = ()                   # for per-layer options (store subsets)
    param_slices: Callable[..., torch.Tensor] | None = None
    # participation.explore is on (FedAWARE's exploration sweep): FedAWARE then steps like FedAvg
    # until every client has been seen, as the authors' code does.
    participation_explore: bool = False


class NoState(NamedTuple):
    """The state of a stage that keeps none (e.g. :class:`SGDOptimizer`,
    :class:`~fedhet.server.averaging.WeightedAverageAggregator`)."""


class Aggregator(Protocol):
    def init(self, params: torch.Tensor, context: ServerContext) -> Any: ...

    def aggregate(self, state: Any, cohort: Cohort,
                  context: ServerContext) -> tuple[Optional[torch.Tensor], Any, dict[str, float]]:
        """``(G, new_state, metrics)``; ``G`` is None when there is nothing to apply this round."""
        ...


class ServerOptimizer(Protocol):
    def init(self, params: torch.Tensor) -> Any: ...

    def update(self, state: Any, pseudo_gradient: torch.Tensor,
               context: ServerContext) -> tuple[torch.Tensor, Any]:
        """``(u, new_state)``: the step, applied as ``x <- x - u``."""
        ...


class StepTransform(Protocol):
    """An optional stage after the optimiser that replaces its step ``u`` (e.g. AWARE's projection).

    ``observe`` sees every round's cohort (also rounds in which the aggregator gives no ``G``);
    ``apply`` runs only when there is a step to transform.
    """

    def init(self, params: torch.Tensor, context: ServerContext) -> Any: ...

    def observe(self, state: Any, cohort: Cohort, context: ServerContext) -> Any: ...

    def apply(self, state: Any, update: torch.Tensor, cohort: Cohort,
              context: ServerContext) -> tuple[torch.Tensor, Any, dict[str, float]]:
        """``(new_update, new_state, metrics)``."""
        ...


class ServerStage(Protocol):
    """Server-side state that a local solver needs (SCAFFOLD's ``c``, FedCM's ``Delta``, FedADMM's
    ``x^0``), owned by the server method (docs/design.md, "Server-side state").

    The solver names its stage (:meth:`fedhet.client.base.LocalSolver.server_stage`);
    :func:`fedhet.algorithms.build` hands it to the server method, whose state holds the stage's
    state (checkpointed with it). ``update`` runs first in every :meth:`ComposedServer.step`, on the
    round's cohort and the model ``x`` the clients started from; ``broadcast`` is what every client
    receives at the start of the next round (:meth:`ComposedServer.broadcast`).
    """

    def init(self, params: torch.Tensor, context: ServerContext) -> Any: ...

    def update(self, state: Any, cohort: Cohort, context: ServerContext, params: torch.Tensor) -> Any: ...

    def broadcast(self, state: Any) -> dict[str, torch.Tensor]: ...


@runtime_checkable
class ServerMethod(Protocol):
    """The server half of an algorithm, as the simulator runs it (module docstring): every
    registered server method satisfies it (tests/server/test_server_base.py)."""

    def init(self, params: torch.Tensor, context: ServerContext) -> Any:
        """The state before round 0."""
        ...

    def broadcast(self, state: Any) -> dict[str, torch.Tensor]:
        """What every client of the next round receives besides ``x`` (empty for most methods)."""
        ...

    def step(self, state: Any, params: torch.Tensor, cohort: Cohort,
             context: ServerContext) -> tuple[torch.Tensor, Any, dict[str, float]]:
        """``(new_params, new_state, metrics)`` after the round's cohort; ``state`` is consumed."""
        ...


@dataclasses.dataclass(frozen=True)
class ServerOptions:
    """Options shared by every server method (``[server]`` section).

    Method-specific options subclass this. The ``aware*`` options select and tune the AWARE
    extension (FedAWARE, AISTATS 2025, Proposition 3.1; :mod:`fedhet.server.aware`), which every
    gradient-step method takes (:func:`fedhet.server.methods.server_method`); the ``aware_*``
    fields are :class:`~fedhet.server.aware_options.AwareOptions`, declared from it.
    """

    learning_rate: float = option(1.0, gt=0, symbol="eta_g", help="server (global) learning rate")
    aware: bool = option(False, help="AWARE extension (FedAWARE, AISTATS 2025, Proposition 3.1): keep "
                                     "FedAWARE's per-client momenta alongside this method and replace its "
                                     "step u by the projection (<u, d>/<d, d>) d onto FedAWARE's direction d")
    aware_alpha: float = aware_field("alpha", help_prefix="AWARE: ")
    aware_normalize: bool = aware_field("normalize", help_prefix="AWARE: ")
    aware_solver_tol: float = aware_field("solver_tol", help_prefix="AWARE: ")
    aware_solver_max_iter: int = aware_field("solver_max_iter", help_prefix="AWARE: ")
    aware_momentum_layers: tuple[str, ...] = aware_field("momentum_layers", help_prefix="AWARE: ")
    aware_kernel: str = aware_field("kernel", help_prefix="AWARE: ")

    def validate(self, section: str) -> None:
        # The aware_* settings tune the extension only: set without it, they would be recorded in
        # config.toml and change nothing (docs/design.md, "No value recorded without taking effect").
        refuse_inactive(self, section, [f"aware_{f.name}" for f in dataclasses.fields(AwareOptions)],
                        active=self.aware, condition=f"{section}.aware = true")


def data_size_weights(cohort: Cohort) -> torch.Tensor:
    """``p_i = n_i / sum_{j in S} n_j`` (docs/algorithms.md section 2), on the deltas' device and in their
    dtype (the sizes are kept on the CPU; on a GPU run ``p @ deltas`` needs both on the GPU)."""
    sizes = cohort.num_examples.to(device=cohort.deltas.device, dtype=cohort.deltas.dtype)
    return sizes / sizes.sum()


class SGDOptimizer:
    """``u = eta_g G``: FedAvg's server step (server SGD with learning rate eta_g)."""

    def __init__(self, learning_rate: float):
        self.learning_rate = learning_rate

    def init(self, params: torch.Tensor) -> NoState:
        return NoState()

    def update(self, state, pseudo_gradient, context):
        return self.learning_rate * pseudo_gradient, state


class ServerState(NamedTuple):
    """The state of a :class:`ComposedServer`: one typed state per stage (``transforms`` in the
    order of the method's transforms; ``stage`` None without a solver stage)."""

    aggregator: Any
    optimizer: Any
    transforms: tuple = ()
    stage: Any = None


class ComposedServer:
    """Aggregator, then optimiser: ``G = aggregate(cohort)``, ``u = optimiser(G)``, ``x <- x - u``;
    with optional :class:`StepTransform` s between ``u`` and the step (``u <- transform(u)``, in
    order) and an optional :class:`ServerStage` holding server-side state the local solver needs
    (updated first in every round, published by :meth:`broadcast`).

    A round whose aggregator returns no ``G`` (e.g. nobody participated) leaves ``x`` and the
    optimiser state unchanged. Reports ``pseudo_grad_norm = ||G||`` and ``update_norm = ||u||``
    (the step actually taken, after the transforms).
    """

    def __init__(self, aggregator: Aggregator, optimizer: ServerOptimizer,
                 transforms: Sequence[StepTransform] = (), stage: Optional[ServerStage] = None):
        self.aggregator = aggregator
        self.optimizer = optimizer
        self.transforms = tuple(transforms)
        self.stage = stage

    def with_stage(self, stage: Optional[ServerStage]) -> "ComposedServer":
        """This method with ``stage`` (a local solver's :class:`ServerStage`; None: unchanged)."""
        if stage is None:
            return self
        if self.stage is not None:
            raise ValueError("a server method holds one solver stage; this one has one already")
        return ComposedServer(self.aggregator, self.optimizer, self.transforms, stage)

    def init(self, params: torch.Tensor, context: ServerContext) -> ServerState:
        return ServerState(aggregator=self.aggregator.init(params, context), optimizer=self.optimizer.init(params),
                           transforms=tuple(transform.init(params, context) for transform in self.transforms),
                           stage=self.stage.init(params, context) if self.stage is not None else None)

    def broadcast(self, state: ServerState) -> dict[str, torch.Tensor]:
        """What every client receives at the start of a round: the stage's broadcast (none without one)."""
        return self.stage.broadcast(state.stage) if self.stage is not None else {}

    def step(self, state: ServerState, params: torch.Tensor, cohort: Cohort,
             context: ServerContext) -> tuple[torch.Tensor, ServerState, dict[str, float]]:
        """``(x', new state, metrics)`` for one round. Consumes ``state`` (docs/design.md, "State"):
        stages whose state holds a :class:`~fedhet.core.store.ClientStore` write it in place, so only the
        returned state may be used afterwards."""
        stage = self.stage.update(state.stage, cohort, context, params) if self.stage is not None else None
        pseudo_gradient, agg_state, metrics = self.aggregator.aggregate(state.aggregator, cohort, context)
        transform_states = [transform.observe(transform_state, cohort, context)
                            for transform, transform_state in zip(self.transforms, state.transforms)]
        if pseudo_gradient is None:
            return params, ServerState(agg_state, state.optimizer, tuple(transform_states), stage), metrics
        check_tensor_output(self.aggregator, "aggregate", pseudo_gradient, params.shape)
        update, opt_state = self.optimizer.update(state.optimizer, pseudo_gradient, context)
        metrics = dict(metrics)
        for index, transform in enumerate(self.transforms):
            update, transform_states[index], transform_metrics = transform.apply(
                transform_states[index], update, cohort, context)
            metrics.update(transform_metrics)
        metrics["pseudo_grad_norm"] = float(torch.linalg.vector_norm(pseudo_gradient))
        metrics["update_norm"] = float(torch.linalg.vector_norm(update))
        return params - update, ServerState(agg_state, opt_state, tuple(transform_states), stage), metrics


def compose(aggregator: Aggregator, optimizer: ServerOptimizer,
            transforms: Sequence[StepTransform] = ()) -> ComposedServer:
    """The server method ``aggregator`` then ``optimizer``, its step passed through ``transforms``
    in order. Knows no method by name: the named methods choose their stages and the transforms
    their options ask for in :func:`fedhet.server.methods.server_method`."""
    return ComposedServer(aggregator, optimizer, transforms)
