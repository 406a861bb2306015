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
turn. A run's evaluations wait in the same way (:meth:`LockstepMember.evaluate`): once every run
still going waits, the pending evaluations are computed first, those alike as one batched
computation of all their models (:mod:`fedhet.backends.batched_eval`). A run that ends (finished,
diverged, failed) leaves the group; the others go on.

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
from fedhet.backends.batched_eval import Forward, batched_forward, eval_key, evaluate_runs
from fedhet.backends.lockstep import LockstepRequest, lockstep_key, train_lockstep
from fedhet.backends.vectorized import CohortGrad, make_cohort_grad, unsupported_reason
from fedhet.client.base import LocalSolver
from fedhet.core.cohort import Cohort
from fedhet.core.task import FederatedTask, evaluate

T = TypeVar("T")
Result = tuple[Cohort, dict[str, torch.Tensor]]


@dataclasses.dataclass(frozen=True)
class EvalRequest:
    """One run's evaluation of ``params`` on ``task.test``, as :func:`fedhet.core.task.evaluate` takes it."""

    task: FederatedTask
    params: torch.Tensor
    batch_size: int


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
    eval_batches: int = 0       # evaluations of several runs computed together
    batched_evals: int = 0      # the run evaluations they computed
    alone_evals: int = 0        # run evaluations computed alone (no other run evaluating alike)


class LockstepGroup:
    """Runs bodies in lockstep (module docstring): ``group.run([body, ...])``; each body builds its run
    with ``backend = group.member(inner, log)`` in place of its own backend."""

    def __init__(self) -> None:
        self._turn = threading.Condition()        # held by the one thread that runs
        self._live = 0
        self._pending: dict[int, LockstepRequest] = {}
        self._evaluations: dict[int, EvalRequest] = {}
        self._results: dict[int, Any] = {}
        self._grads: dict[Hashable, CohortGrad] = {}
        self._forwards: dict[Hashable, Forward] = {}
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
        return self._wait(member_id, self._pending, request)

    def evaluate(self, member_id: int, request: EvalRequest) -> tuple[float, float]:
        """Hand an evaluation to the group and wait for its ``(loss, accuracy)`` (holding the turn)."""
        return self._wait(member_id, self._evaluations, request)

    def _wait(self, member_id: int, queue: dict[int, Any], request: Any) -> Any:
        if self._interrupted:
            raise LockstepInterrupted("the lockstep group was interrupted")
        queue[member_id] = request
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
        """Once every run still going waits: compute the pending evaluations, or, when none is
        pending, train the pending rounds."""
        waiting = len(self._pending) + len(self._evaluations)
        if not waiting or waiting < self._live:
            return
        if self._evaluations:
            self._evaluate()
            self._turn.notify_all()
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

    def _evaluate(self) -> None:
        """The pending evaluations, those of equal :func:`eval_key` as one batched computation; an
        evaluation with no other alike is the run-alone code."""
        pending, self._evaluations = self._evaluations, {}
        batches: dict[Hashable, list[int]] = {}
        for member_id, request in pending.items():
            batches.setdefault(eval_key(request.task, request.batch_size), []).append(member_id)
        for key, members in batches.items():
            requests = [pending[m] for m in members]
            try:
                if len(requests) == 1:
                    request = requests[0]
                    outcomes: list[Any] = [evaluate(request.task, request.params, batch_size=request.batch_size)]
                    self.stats.alone_evals += 1
                else:
                    forward = self._forwards.get(key)
                    if forward is None:
                        forward = self._forwards[key] = batched_forward(requests[0].task)
                    outcomes = list(evaluate_runs([r.task for r in requests], [r.params for r in requests],
                                                  requests[0].batch_size, forward))
                    self.stats.eval_batches += 1
                    self.stats.batched_evals += len(requests)
            except Exception as error:  # noqa: BLE001  (every run of the batch fails with it)
                outcomes = [error] * len(requests)
            self._results.update(zip(members, outcomes))


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

    def evaluate(self, task: FederatedTask, params: torch.Tensor, *, batch_size: int) -> tuple[float, float]:
        """:func:`fedhet.core.task.evaluate`'s numbers, computed with the other runs' evaluations
        of the same kind at this moment (:mod:`fedhet.backends.batched_eval`); alone for a run that
        trains alone."""
        if self._checked is None or self._checked[2] is not None:
            return evaluate(task, params, batch_size=batch_size)
        return self.group.evaluate(self.member_id, EvalRequest(task, params, batch_size))

    def train_cohort(self, task: FederatedTask, solver: LocalSolver, work: RoundWork) -> Result:
        if self.obstacle(task, solver) is not None:
            self.group.stats.alone_rounds += 1
            return self.inner.train_cohort(task, solver, work)
        return self.group.submit(self.member_id, LockstepRequest(task, solver, work))

    def close(self) -> None:
        self.inner.close()
