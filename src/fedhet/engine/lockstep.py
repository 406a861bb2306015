"""Lockstep runs: several runs in one process whose rounds train as one batched computation.

Each run of a :class:`LockstepGroup` is the run-alone code (``run_experiment`` or ``resume_run``,
with its run directory, evaluation, callbacks, checkpoints, divergence checks and summary) in a
thread of its own; only its backend differs: a :class:`LockstepMember`, whose ``train_cohort`` hands
the run's round to the group and waits. The threads take turns (one runs Python at a time, holding
the group's lock, so nothing of a run interleaves with another's: the global torch state, logging,
the dataset cache), and a member gives up its turn only while it waits for a batch. When every run
still going waits for a batch, the last one to arrive trains all their rounds at once
(:func:`fedhet.backends.lockstep.train_lockstep`, one batch per :func:`~fedhet.backends.lockstep.lockstep_key`)
and hands each run its own rows; each run then takes its own server step, evaluation and files in
turn. A run that ends (finished, diverged, failed) leaves the group; the others go on.

Runs need not be at the same round (a resumed run, a round with no participants): each row carries
its own run's round, seed and learning rate. A run the vectorised backend refuses (dropout,
batch-norm statistics, a solver that opts out, a model ``vmap`` cannot run) trains alone on its own
backend, with one line in its log saying why. docs/design.md ("Lockstep runs") has the design.
"""
from __future__ import annotations

import dataclasses
import threading
from typing import Any, Callable, Hashable, Optional, TypeVar

import torch

from fedhet.backends.base import Backend, RoundWork
from fedhet.backends.lockstep import LockstepRequest, lockstep_key, train_lockstep
from fedhet.backends.vectorized import CohortGrad, make_cohort_grad, unsupported_reason
from fedhet.client.base import LocalSolver
from fedhet.core.cohort import Cohort
from fedhet.core.task import FederatedTask

T = TypeVar("T")
Result = tuple[Cohort, dict[str, torch.Tensor]]


class LockstepInterrupted(RuntimeError):
    """The group was interrupted (Ctrl-C in the thread that runs it); each run's last checkpoint stays."""


@dataclasses.dataclass
class LockstepStats:
    """What the group did: batched computations, the run-rounds they trained, rounds trained alone,
    and the batches' real examples against their padded example slots (what padding costs)."""

    batches: int = 0
    run_rounds: int = 0
    alone_rounds: int = 0
    examples: int = 0
    slots: int = 0


class LockstepGroup:
    """Runs bodies in lockstep (module docstring): ``group.run([body, ...])``; each body builds its run
    with ``backend = group.member(inner, log)`` in place of its own backend."""

    def __init__(self) -> None:
        self._turn = threading.Condition()        # held by the one thread that runs
        self._live = 0
        self._pending: dict[int, LockstepRequest] = {}
        self._results: dict[int, Result | BaseException] = {}
        self._grads: dict[Hashable, CohortGrad] = {}
        self._next_id = 0
        self._interrupted = False
        self.stats = LockstepStats()

    def member(self, inner: Backend, log: Callable[[str], None] = lambda message: None) -> "LockstepMember":
        """The backend of one run of this group; ``inner`` trains its rounds when it cannot join."""
        self._next_id += 1
        return LockstepMember(self, self._next_id, inner, log)

    def run(self, bodies: list[Callable[[], T]]) -> list[T | BaseException]:
        """Run every body in its own thread, in lockstep; each body's result, or the exception it raised."""
        outcomes: list[Any] = [None] * len(bodies)
        self._live = len(bodies)

        def thread_main(i: int, body: Callable[[], T]) -> None:
            with self._turn:
                try:
                    outcomes[i] = body()
                except BaseException as error:  # noqa: BLE001  (handed to the caller as this run's outcome)
                    outcomes[i] = error
                finally:
                    self._live -= 1
                    self._maybe_train()

        threads = [threading.Thread(target=thread_main, args=(i, body), daemon=True, name=f"lockstep-{i}")
                   for i, body in enumerate(bodies)]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.2)
        except KeyboardInterrupt:
            with self._turn:
                self._interrupted = True
                self._turn.notify_all()
            raise
        return outcomes

    # --- inside a member's turn -------------------------------------------------------------------
    def submit(self, member_id: int, request: LockstepRequest) -> Result:
        """Hand a round to the group and wait for its rows (called holding the turn)."""
        if self._interrupted:
            raise LockstepInterrupted("the lockstep group was interrupted")
        self._pending[member_id] = request
        self._maybe_train()
        while member_id not in self._results:
            if self._interrupted:
                raise LockstepInterrupted("the lockstep group was interrupted")
            self._turn.wait()
        result = self._results.pop(member_id)
        if isinstance(result, BaseException):
            raise result
        return result

    def _maybe_train(self) -> None:
        """Train the pending rounds once every run still going waits for one."""
        if not self._pending or len(self._pending) < self._live:
            return
        pending, self._pending = self._pending, {}
        batches: dict[Hashable, list[int]] = {}
        for member_id, request in pending.items():
            batches.setdefault(lockstep_key(request.task, request.solver), []).append(member_id)
        for key, members in batches.items():
            requests = [pending[m] for m in members]
            try:
                grad = self._grads.get(key)
                if grad is None:
                    grad = self._grads[key] = make_cohort_grad(requests[0].task)
                requests[0].task.model.train()
                results, (examples, slots) = train_lockstep(requests, grad)
                trained: list[Result | BaseException] = list(results)
                self.stats.examples += examples
                self.stats.slots += slots
            except Exception as error:  # noqa: BLE001  (every run of the batch fails with it)
                trained = [error] * len(requests)
            self.stats.batches += 1
            self.stats.run_rounds += len(requests)
            self._results.update(zip(members, trained))
        self._turn.notify_all()


class LockstepMember:
    """One run's backend in a :class:`LockstepGroup`; ``inner`` is the backend it would have alone."""

    name = "lockstep"

    def __init__(self, group: LockstepGroup, member_id: int, inner: Backend, log: Callable[[str], None]):
        self.group, self.member_id, self.inner, self.log = group, member_id, inner, log
        self._checked: Optional[tuple[FederatedTask, LocalSolver, Optional[str]]] = None

    def obstacle(self, task: FederatedTask, solver: LocalSolver) -> Optional[str]:
        """Why this run cannot join the batch (said once in its log), or None."""
        if self._checked is None or self._checked[0] is not task or self._checked[1] is not solver:
            reason = unsupported_reason(task, solver)
            self._checked = (task, solver, reason)
            if reason is not None:
                self.log(f"lockstep: this run trains alone on the {self.inner.name} backend: {reason}")
        return self._checked[2]

    def train_cohort(self, task: FederatedTask, solver: LocalSolver, work: RoundWork) -> Result:
        if self.obstacle(task, solver) is not None:
            self.group.stats.alone_rounds += 1
            return self.inner.train_cohort(task, solver, work)
        return self.group.submit(self.member_id, LockstepRequest(task, solver, work))

    def close(self) -> None:
        self.inner.close()
