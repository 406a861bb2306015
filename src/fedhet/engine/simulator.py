"""The round loop without files or configuration: components plus their explicit state.

::

    S_t, participation_state = participation.sample(participation_state, t)
    cohort, new_client_states = backend.train_cohort(task, solver, RoundWork(x, S_t, server.broadcast(server_state), ...))
    x, server_state, metrics = server.step(server_state, x, cohort, context)

The solver and the server method are one algorithm's two halves, built together by
:func:`fedhet.algorithms.build` (server-side state the clients need is the server's, published by
``server.broadcast``; docs/design.md "Server-side state").

:class:`Simulator` is what tests and notebooks use directly (any task, loss and components);
:func:`fedhet.engine.assembly.simulator_from_config` builds it from a configuration, and
:mod:`fedhet.engine.runner` wraps it with evaluation, files and callbacks. Every
random stream is keyed by (seed, round, client), so :meth:`state_dict` / :meth:`load_state` resume a
run bit for bit.
"""
from __future__ import annotations

import math
from typing import Any, Optional

import torch

from fedhet.backends.base import Backend, RoundWork
from fedhet.backends.sequential import SequentialBackend
from fedhet.client.base import LocalSolver, local_learning_rate, with_effective_steps
from fedhet.core.cohort import Cohort
from fedhet.core.component_output import check_tensor_output
from fedhet.core.store import ClientStore, StoreOptions
from fedhet.core.task import FederatedTask
from fedhet.engine import checkpoint as ckpt
from fedhet.engine.clock import VirtualClock
from fedhet.engine.determinism import deterministic_kernels
from fedhet.engine.divergence import divergence_reason
from fedhet.engine.metrics import cohort_metrics
from fedhet.engine.participation_log import ParticipationLog
from fedhet.errors import FedhetError
from fedhet.participation.base import ParticipationContext, ParticipationProcess
from fedhet.server.base import ServerContext, ServerMethod


class TrainingDivergedError(FedhetError, RuntimeError):
    """A round diverged (non-finite or exploding loss, update norms or model; see
    :mod:`fedhet.engine.divergence`); the last good checkpoint is kept."""


class Simulator:
    """One federated simulation: task, four stages, backend, and the state of each stage."""

    def __init__(self, task: FederatedTask, *, participation: ParticipationProcess, solver: LocalSolver,
                 server: ServerMethod, seed: int, client_label_counts: Optional[torch.Tensor] = None,
                 backend: Optional[Backend] = None,
                 store_options: StoreOptions = StoreOptions(), params: Optional[torch.Tensor] = None,
                 clock: Optional[VirtualClock] = None):
        self.task = task
        self.process = participation
        self.solver = solver
        needed = solver.server_stage()
        if needed is not None and type(getattr(server, "stage", None)) is not type(needed):
            # Otherwise the first client would fail on a missing broadcast key (e.g. SCAFFOLD's c).
            raise ValueError(f"{type(solver).__name__}'s clients read server-side state ({type(needed).__name__}) "
                             "that this server method does not hold; build both halves with "
                             "fedhet.algorithms.build (docs/design.md, \"Server-side state\")")
        self.server = server
        self.seed = seed
        self.backend: Backend = backend or SequentialBackend()
        self.device = task.device
        self.store_options = store_options
        counts = client_label_counts
        if counts is None:
            counts = torch.zeros(task.num_clients, task.num_classes, dtype=torch.int64)
        self.participation_context = ParticipationContext(
            num_clients=task.num_clients, seed=seed, client_label_counts=counts)
        x0 = params if params is not None else task.spec.flatten(task.model)
        self.params = x0.to(self.device, task.dtype).clone()
        self.next_round = 0
        self.participation_state = self.process.init(self.participation_context)
        self.client_stores = {name: self.make_store(f"client-{name}") for name in self.solver.client_state_names}
        self.server_state = self.server.init(self.params, self.server_context(0))
        # Which clients trained in which round (for rasters and FedAU diagnostics); grown as rounds
        # run, so nothing is allocated for rounds not yet run.
        self.participations = ParticipationLog(task.num_clients)
        self.e_lud_sum, self.e_lud_count = 0.0, 0
        # The virtual clock ([system] section, fedhet.engine.clock); None = rounds take no time.
        self.clock = clock
        self.clock_state = clock.init() if clock is not None else None

    def make_store(self, name: str, subset: Optional[torch.Tensor] = None) -> ClientStore:
        """A per-client ``[N, d]`` store with this run's storage options."""
        return ClientStore(name, self.task.num_clients, self.task.spec.dim, options=self.store_options,
                           subset=subset, compute_dtype=self.task.dtype)

    def server_context(self, round_index: int) -> ServerContext:
        return ServerContext(
            round_index=round_index, num_clients=self.task.num_clients, make_store=self.make_store,
            participation_probabilities=self.process.probabilities(self.participation_state),
            param_names=self.task.spec.names, param_slices=self.task.spec.slices,
            participation_explore=self.process.explores())

    def learning_rate(self, round_index: int) -> float:
        return local_learning_rate(self.solver.options, round_index)

    def run_round(self) -> tuple[dict[str, Any], Cohort]:
        """Run round ``next_round``; returns its metrics record (no evaluation) and the cohort.
        On a GPU the round runs with deterministic cuDNN kernels (:mod:`fedhet.engine.determinism`)."""
        with deterministic_kernels(self.task.device):
            return self._run_round()

    def _run_round(self) -> tuple[dict[str, Any], Cohort]:
        task, t = self.task, self.next_round
        # clock, clock_state and (below) round_plan are all None (no [system] clock) or all set; the
        # tests of each name them for the type checker.
        clock, clock_state = self.clock, self.clock_state
        context = (self.participation_context if clock is None or clock_state is None
                   else clock.participation_context(clock_state, self.participation_context))
        client_ids, self.participation_state = self.process.sample(self.participation_state, t, context)
        client_ids = client_ids.to(torch.int64).cpu()
        learning_rate = self.learning_rate(t)
        broadcast = self.server.broadcast(self.server_state)
        round_plan = None
        if clock is not None and clock_state is not None:
            # Who is kept and for how many steps (docs/system.md, "Policies").
            round_plan = clock.plan(clock_state, task, self.solver, client_ids, broadcast, self.params,
                                    seed=self.seed, round_index=t)
            client_ids = round_plan.client_ids
        if client_ids.numel() > 0:
            work = RoundWork(round_index=t, seed=self.seed, params=self.params, client_ids=client_ids,
                             client_states={name: store.read(client_ids) for name, store in self.client_stores.items()},
                             broadcast=broadcast, learning_rate=learning_rate,
                             step_limits=round_plan.timing.step_limits if round_plan is not None else None)
            cohort, new_states = self.backend.train_cohort(task, self.solver, work)
            # A deployment's backend (fedhet.flower) returns only the clients whose replies arrived
            # (docs/flower.md, "Failures"): the round goes on with those, and only they count as
            # having participated. Simulation backends return every sampled client.
            client_ids = cohort.client_ids.to(torch.int64).cpu()
            with_effective_steps(cohort, self.solver, learning_rate)
            for name, store in self.client_stores.items():
                store.write(client_ids, new_states[name])
        else:
            cohort = Cohort.empty(task.spec.dim, task.dtype, task.device)
        step = f"round {t + 1}"
        detail = f"local learning rate {learning_rate:g}; "
        params, server_metrics = self.server_step(cohort, step, detail)
        record = self.commit_step(cohort, params, server_metrics, client_ids, learning_rate, step, detail)
        if clock is not None and clock_state is not None and round_plan is not None:
            self.clock_state, clock_metrics = clock.advance(clock_state, round_plan, int(client_ids.numel()))
            record.update(clock_metrics)
        return record, cohort

    def server_step(self, cohort: Cohort, step: str, detail: str = "") -> tuple[torch.Tensor, dict[str, float]]:
        """The server method's step ``next_round`` on ``cohort``: the new parameters and its metrics.
        ``step`` names the step in a divergence message ("round 3"), ``detail`` adds to it."""
        try:
            params, self.server_state, server_metrics = self.server.step(self.server_state, self.params, cohort,
                                                                         self.server_context(self.next_round))
        except (ValueError, RuntimeError, ArithmeticError) as error:
            # Updates that already diverged can break the server's step first (FedAWARE's Gram matrix
            # overflowing float32): that is the step diverging, not a bug. A step failing on healthy
            # updates is re-raised as it is.
            reason = divergence_reason(cohort, cohort_metrics(cohort), {}, self.params, self.params)
            if reason is None:
                raise
            raise TrainingDivergedError(_diverged_message(step, reason, detail)) from error
        check_tensor_output(self.server, "step", params, self.params.shape)
        return params, server_metrics

    def commit_step(self, cohort: Cohort, params: torch.Tensor, server_metrics: dict[str, float],
                    client_ids: torch.Tensor, learning_rate: float, step: str, detail: str = "") -> dict[str, Any]:
        """Accept ``params`` as step ``next_round``'s model unless the step diverged (the loss, the update
        norms and the model, not the model alone: :mod:`fedhet.engine.divergence`); the step's record
        (no evaluation, no clock keys), with the e-LUD running sums updated."""
        diagnostics = cohort_metrics(cohort)
        diverged = divergence_reason(cohort, diagnostics, server_metrics, self.params, params)
        if diverged is not None:
            raise TrainingDivergedError(_diverged_message(step, diverged, detail))
        t = self.next_round
        self.params = params
        self.participations.append(client_ids)
        self.next_round = t + 1
        record: dict[str, Any] = {"round": t + 1, "num_participants": int(client_ids.numel()),
                                  "learning_rate": learning_rate}
        if "e_lud" in diagnostics and math.isfinite(diagnostics["e_lud"]):
            self.e_lud_sum += diagnostics["e_lud"]
            self.e_lud_count += 1
        record.update(diagnostics)
        record.update(server_metrics)
        return record

    @property
    def broadcast(self) -> dict[str, torch.Tensor]:
        """What the clients of the next round receive (the server method's broadcast, e.g.
        SCAFFOLD's ``control_variate``)."""
        return self.server.broadcast(self.server_state)

    @property
    def participation_log(self) -> torch.Tensor:
        """``[rounds run, N]`` bool: whether client n trained in round t."""
        return self.participations.dense()

    def run(self, rounds: int) -> torch.Tensor:
        """Run ``rounds`` more rounds; returns the model."""
        for _ in range(rounds):
            self.run_round()
        return self.params

    # --- state ---------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"next_round": self.next_round, "params": self.params,
                "participation": self.participation_state, "client_stores": self.client_stores,
                "server": self.server_state,
                "participation_log": self.participations.state_dict(),
                "e_lud_sum": self.e_lud_sum, "e_lud_count": self.e_lud_count,
                **({"clock": self.clock_state} if self.clock is not None else {})}

    def load_state(self, saved: dict[str, Any]) -> None:
        restored = ckpt.restore(self.state_dict(), saved, self.device)
        self.next_round = restored["next_round"]
        self.params = restored["params"]
        self.participation_state = restored["participation"]
        self.client_stores = restored["client_stores"]
        self.server_state = restored["server"]
        self.participations.load_state_dict(restored["participation_log"])
        self.e_lud_sum, self.e_lud_count = restored["e_lud_sum"], restored["e_lud_count"]
        if self.clock is not None:
            self.clock_state = restored["clock"]


def _diverged_message(step: str, reason: str, detail: str) -> str:
    return f"{step} diverged: {reason}; {detail}lower the learning rates or enable client.clip_norm"
