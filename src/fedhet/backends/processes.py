"""The multi-process CPU backend: one process per usable core (the parent and forked workers),
one torch thread each.

Why processes and not threads: federated simulation is many small kernels (a minibatch of 32 through
a small model), where a second intra-op thread gains little; independent clients in separate
processes keep every core busy with no synchronisation between them.

Why the parent computes too: with ``P`` usable cores, ``P - 1`` workers are forked and the parent
takes a share itself, so exactly ``P`` processes compete for ``P`` cores. With ``P`` forked workers
and a waiting parent, every request woke a worker that preempted the parent before it had sent the
next request (benchmarks/README.md, "Threads", has the cost), and the parent needed a core back to
collect.

Design (the numbers are bitwise those of :class:`~fedhet.backends.sequential.SequentialBackend`
run with one thread, in float32 and float64):

- **Workers** are forked once per run (at the first round) and stay alive across rounds; the pool
  is shut down by :meth:`ProcessPoolBackend.close`, when the backend is garbage collected, or at
  interpreter exit. A worker gets EOF on its pipe when the parent dies, and exits.
- **Data**: the task (model, client-contiguous training set, test set) is inherited through
  ``fork``. Nobody writes those tensors, so their pages stay physically shared (copy-on-write
  never copies them): no dataset copy per worker, nothing pickled.
- **Per round**: the parent writes ``x``, the cohort's rows of the per-client states and the
  solver's broadcast into tensors in anonymous shared memory (the *arena*, mapped before the fork,
  so it needs no ``/dev/shm`` space), sends
  each worker the round's claim order and client ids (a few bytes), and every process runs the
  sequential backend's code on the clients it claims, writing deltas and new client states into
  their rows of the arena. Small per-client results (step counts, losses, solver extras) come back
  pickled. Clients are not assigned in advance: every process (the parent too) claims the next client from
  a shared counter as soon as it is free, in longest-processing-time order of the planned work
  (steps x batch size). So Hybrid+ cohorts with very unequal clients balance, and so does a
  process that runs slower than planned (a busy core, a noisy neighbour). Who trains which client
  cannot change any number: each client's computation is independent of the others.
- **Evaluation** (:meth:`ProcessPoolBackend.evaluate`): the test set's forward passes are split
  into contiguous runs, one per process (the last run is the parent's); the per-pass loss sums and
  correct counts are added in pass order in the parent, exactly as :func:`fedhet.core.task.evaluate` adds them, so the metrics are
  bitwise those of a one-thread evaluation in one process.
- The arena is re-allocated (and the workers re-forked) only when a round needs more rows than it
  has (capacity doubles) or the solver's state layout changes.

CPU only: a task on a GPU is refused (use the vectorised backend there). Needs the ``fork`` start
method (Linux, macOS with care); :func:`fork_available` tells.
"""
from __future__ import annotations

import math
import mmap
import multiprocessing
import pickle
import signal
import traceback
import weakref
from multiprocessing.connection import Connection
from typing import Any, Optional

import torch

from fedhet.backends.base import RoundWork, client_plan, cohort_sizes
from fedhet.backends.sequential import SequentialBackend
from fedhet.client.base import LocalSolver
from fedhet.core.cohort import Cohort
from fedhet.core.task import FederatedTask, combine_passes, eval_pass_size, eval_passes, evaluate_passes

Layout = dict[str, tuple[tuple[int, ...], torch.dtype]]

# Holding the claim lock takes microseconds; this long means its holder died.
_LOCK_TIMEOUT_SECONDS = 60.0


def fork_available() -> bool:
    return "fork" in multiprocessing.get_all_start_methods()


# --- the arena: tensors in shared memory, written by one side and read by the other ----------------

def arena_layout(task: FederatedTask, work: RoundWork, capacity: int) -> Layout:
    """Names, shapes and dtypes of the shared tensors a round of ``work`` needs, with room for
    ``capacity`` clients: ``params`` ``[d]``, ``deltas`` ``[C, d]``, the claim counter ``claimed``
    ``[1]`` (see :func:`train_claimed`), ``state/<name>`` and
    ``new_state/<name>`` ``[C, ...]`` per client state, ``broadcast/<name>`` per broadcast entry."""
    layout: Layout = {"params": ((task.spec.dim,), task.dtype), "deltas": ((capacity, task.spec.dim), task.dtype),
                      "claimed": ((1,), torch.int64)}
    for name, rows in work.client_states.items():
        layout[f"state/{name}"] = ((capacity, *rows.shape[1:]), rows.dtype)
        layout[f"new_state/{name}"] = ((capacity, *rows.shape[1:]), rows.dtype)
    for name, value in work.broadcast.items():
        layout[f"broadcast/{name}"] = (tuple(value.shape), value.dtype)
    return layout


ROW_TABLES = ("deltas", "state", "new_state")     # arena entries with one row per client


def fits(layout: Layout, needed: Layout) -> bool:
    """Whether an arena of ``layout`` can hold a round that needs ``needed``."""
    if layout.keys() != needed.keys():
        return False
    for name, (shape, dtype) in needed.items():
        have_shape, have_dtype = layout[name]
        if have_dtype != dtype:
            return False
        if name.split("/")[0] in ROW_TABLES:
            if have_shape[1:] != shape[1:] or have_shape[0] < shape[0]:
                return False
        elif have_shape != shape:
            return False
    return True


def allocate(layout: Layout) -> dict[str, torch.Tensor]:
    """Zeroed tensors of ``layout`` in anonymous shared memory (``mmap`` with ``MAP_SHARED``): a
    forked worker writes the very pages the parent reads. Unlike ``Tensor.share_memory_()`` this
    needs no ``/dev/shm`` space, which containers often limit to 64 MB."""
    tensors = {}
    for name, (shape, dtype) in layout.items():
        numel = math.prod(shape)
        if numel == 0:
            tensors[name] = torch.zeros(shape, dtype=dtype)
            continue
        region = mmap.mmap(-1, numel * torch.empty((), dtype=dtype).element_size())
        # frombuffer keeps a reference to the region, so the mapping lives as long as the tensor.
        tensors[name] = torch.frombuffer(region, dtype=dtype, count=numel).view(shape)
    return tensors


# --- the worker process ------------------------------------------------------------------------------

def worker_main(conn: Connection, inherited: list[Connection], task: FederatedTask, solver: LocalSolver,
                arena: dict[str, torch.Tensor], lock: Any) -> None:
    """A worker's loop: answer ``train`` and ``eval`` requests until ``None`` or EOF."""
    for other in inherited:          # the parent's ends: holding them would hide the parent's death
        other.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the parent's to handle
    torch.set_num_threads(1)
    backend = SequentialBackend()
    while True:
        try:
            request = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        if request is None:
            return
        try:
            if request[0] == "train":
                reply = ("ok", train_claimed(task, solver, arena, backend, lock, *request[1:]))
            elif request[0] == "eval":
                loss_sums, correct = evaluate_passes(task, arena["params"], request[1])
                reply = ("ok", (loss_sums.tolist(), correct.tolist()))
            else:
                reply = ("error", f"unknown request {request[0]!r}")
        except BaseException:  # noqa: BLE001  (report any failure to the parent, with its traceback)
            reply = ("error", traceback.format_exc())
        conn.send_bytes(pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL))


def train_clients(task: FederatedTask, solver: LocalSolver, arena: dict[str, torch.Tensor], backend: SequentialBackend,
                  round_index: int, seed: int, learning_rate: float, rows: list[int],
                  client_ids: list[int], step_limits: Optional[dict[int, int]] = None,
                  ) -> tuple[list[int], list[float], dict[str, torch.Tensor]]:
    """Train the clients at cohort positions ``rows`` (ids ``client_ids``) with the sequential code,
    writing their deltas and new states into the arena; returns their step counts, losses (lists)
    and extras (tensors)."""
    positions = torch.tensor(rows, dtype=torch.int64)
    state_names = [name.split("/", 1)[1] for name in arena if name.startswith("state/")]
    work = RoundWork(round_index=round_index, seed=seed, params=arena["params"],
                     client_ids=torch.tensor(client_ids, dtype=torch.int64),
                     client_states={name: arena[f"state/{name}"][positions] for name in state_names},
                     broadcast={name.split("/", 1)[1]: value for name, value in arena.items()
                                if name.startswith("broadcast/")},
                     learning_rate=learning_rate, step_limits=step_limits)
    cohort, new_states = backend.train_cohort(task, solver, work)
    arena["deltas"].index_copy_(0, positions, cohort.deltas)
    if set(new_states) != set(state_names):
        raise RuntimeError(f"solver {type(solver).__name__} returned client states {sorted(new_states)}, "
                           f"expected {sorted(state_names)} (its client_state_names)")
    for name, values in new_states.items():
        arena[f"new_state/{name}"].index_copy_(0, positions, values)
    return cohort.local_steps.tolist(), cohort.train_loss.tolist(), cohort.extras


def train_claimed(task: FederatedTask, solver: LocalSolver, arena: dict[str, torch.Tensor],
                  backend: SequentialBackend, lock: Any, round_index: int, seed: int, learning_rate: float,
                  order: list[int], client_ids: list[int], step_limits: Optional[dict[int, int]] = None,
                  ) -> tuple[list[int], list[int], list[float], dict]:
    """Claim cohort positions from ``order`` through the arena's shared counter (under ``lock``) and
    train each, until every position is claimed. Returns ``(positions, steps, losses, extras)`` of
    the clients this process trained; lists travel back to the parent cheaply (a short list pickles
    far faster than a tensor; float64 losses survive exactly)."""
    counter = arena["claimed"]
    positions: list[int] = []
    steps: list[int] = []
    losses: list[float] = []
    extras_rows: list[dict[str, torch.Tensor]] = []
    while True:
        # A timeout instead of a hang if a process was killed while holding the lock.
        if not lock.acquire(timeout=_LOCK_TIMEOUT_SECONDS):
            raise RuntimeError(f"processes backend: the claim lock was not released within "
                               f"{_LOCK_TIMEOUT_SECONDS} s (a process died while holding it?)")
        try:
            claimed = int(counter[0])
            counter[0] = claimed + 1
        finally:
            lock.release()
        if claimed >= len(order):
            break
        position = order[claimed]
        client_steps, client_losses, client_extras = train_clients(
            task, solver, arena, backend, round_index, seed, learning_rate, [position], [client_ids[position]],
            step_limits)
        positions.append(position)
        steps += client_steps
        losses += client_losses
        extras_rows.append(client_extras)
    extras = {name: torch.cat([row[name] for row in extras_rows]) for name in (extras_rows[0] if extras_rows else {})}
    return positions, steps, losses, extras


def claim_order(costs: list[int]) -> list[int]:
    """Cohort positions in the order they are claimed: largest planned work first (ties by
    position), the longest-processing-time rule of list scheduling. Deterministic."""
    return sorted(range(len(costs)), key=lambda k: (-costs[k], k))


# --- the pool, in the parent ---------------------------------------------------------------------------

class WorkerPool:
    """``size`` forked workers (possibly none) sharing ``arena`` with the parent, for one (task,
    solver) pair."""

    def __init__(self, size: int, task: FederatedTask, solver: LocalSolver, layout: Layout):
        self.task, self.solver, self.layout = task, solver, layout
        self.closed = False
        self.arena = allocate(layout)
        context = multiprocessing.get_context("fork")
        self.lock = context.Lock()              # guards arena["claimed"]
        self.connections: list[Connection] = []
        self.processes: list[Any] = []
        for rank in range(size):
            parent_end, child_end = context.Pipe(duplex=True)
            process = context.Process(target=worker_main, name=f"fedhet-worker-{rank}", daemon=True,
                                      args=(child_end, [*self.connections, parent_end], task, solver, self.arena, self.lock))
            process.start()
            child_end.close()
            self.connections.append(parent_end)
            self.processes.append(process)

    @property
    def size(self) -> int:
        return len(self.processes)

    def send(self, requests: dict[int, tuple]) -> None:
        """Send ``requests[rank]`` to each named worker (answered by :meth:`collect`)."""
        for rank, message in requests.items():
            self.connections[rank].send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))

    def collect(self, ranks) -> dict[int, Any]:
        """The replies of the workers ``ranks`` (in that order); closes the pool and raises if any
        worker failed or died."""
        replies, failures = {}, []
        for rank in ranks:
            try:
                status, payload = pickle.loads(self.connections[rank].recv_bytes())
            except (EOFError, OSError):
                code = self.processes[rank].exitcode
                failures.append(f"worker {rank} died (exit code {code})")
                continue
            if status != "ok":
                failures.append(f"worker {rank} failed:\n{payload}")
            replies[rank] = payload
        if failures:
            self.close()
            raise RuntimeError("processes backend: " + "\n".join(failures))
        return replies

    def close(self) -> None:
        self.closed = True
        for connection in self.connections:
            try:
                connection.send_bytes(pickle.dumps(None))
            except (OSError, ValueError):
                pass
        for process in self.processes:
            process.join(timeout=5)
            if process.is_alive():
                process.terminate()
                process.join(timeout=5)
        for connection in self.connections:
            connection.close()
        self.connections, self.processes = [], []


class ProcessPoolBackend:
    """Clients of a cohort trained by this process and persistent one-thread workers; see the module
    docstring."""

    name = "processes"

    def __init__(self, workers: int):
        """``workers``: processes computing in parallel, the parent included (``workers - 1`` are
        forked); one per usable core."""
        if workers < 1:
            raise ValueError(f"the processes backend needs at least one process, got {workers}")
        if not fork_available():
            raise RuntimeError("the processes backend needs the 'fork' start method, which this platform lacks; "
                               "use run.backend = 'sequential'")
        self.workers = workers
        self._pool: Optional[WorkerPool] = None
        self._capacity = 0
        self._local = SequentialBackend()      # the parent's share runs the same code in-process

    def close(self) -> None:
        """Shut the worker processes down (a later round starts new ones)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def _pool_for(self, task: FederatedTask, solver: LocalSolver, work: RoundWork) -> WorkerPool:
        """The running pool if it serves this task, solver and round; else a new one (re-forked)."""
        num_clients = int(work.client_ids.numel())
        pool = self._pool
        if (pool is not None and not pool.closed and pool.task is task and pool.solver is solver
                and fits(pool.layout, arena_layout(task, work, num_clients))):
            return pool
        self.close()
        # Grow by doubling, so that a cohort size that drifts upwards re-forks O(log N) times.
        capacity = max(num_clients, self._capacity)
        if num_clients > self._capacity > 0:
            capacity = max(num_clients, min(2 * self._capacity, task.num_clients))
        self._capacity = capacity
        pool = self._pool = WorkerPool(self.workers - 1, task, solver, arena_layout(task, work, capacity))
        weakref.finalize(self, pool.close)
        return pool

    def train_cohort(self, task: FederatedTask, solver: LocalSolver,
                     work: RoundWork) -> tuple[Cohort, dict[str, torch.Tensor]]:
        if task.device.type != "cpu":
            raise RuntimeError(f"the processes backend runs on the CPU; this task is on {task.device} "
                               f"(use run.backend = 'vectorized' or 'auto')")
        num_clients = int(work.client_ids.numel())
        if num_clients == 0:
            return self._local.train_cohort(task, solver, work)
        pool = self._pool_for(task, solver, work)
        arena = pool.arena
        arena["params"].copy_(work.params)
        for name, rows in work.client_states.items():
            arena[f"state/{name}"][:num_clients].copy_(rows)
        for name, value in work.broadcast.items():
            arena[f"broadcast/{name}"].copy_(value)

        client_ids = work.client_ids.tolist()
        plans = [client_plan(task, solver.options, work, client_id) for client_id in client_ids]
        order = claim_order([plan.num_steps * plan.batch_size for plan in plans])
        arena["claimed"].zero_()
        request = (work.round_index, work.seed, work.learning_rate, order, client_ids, work.step_limits)
        # Workers beyond the cohort size would find nothing to claim.
        requests = {rank: ("train", *request) for rank in range(min(pool.size, num_clients - 1))}
        pool.send(requests)
        replies = {pool.size: self._run_locally(pool, train_claimed, task, solver, arena, self._local, pool.lock,
                                                *request)}
        replies.update(pool.collect(requests))

        steps = torch.empty(num_clients, dtype=torch.int64)
        losses = torch.empty(num_clients, dtype=torch.float64)
        extras: dict[str, torch.Tensor] = {}
        trained = 0
        for rank, (positions_list, share_steps, share_losses, share_extras) in replies.items():
            if not positions_list:
                continue
            trained += len(positions_list)
            positions = torch.tensor(positions_list, dtype=torch.int64)
            steps[positions] = torch.tensor(share_steps, dtype=torch.int64)
            losses[positions] = torch.tensor(share_losses, dtype=torch.float64)
            for name, values in share_extras.items():
                if name not in extras:
                    extras[name] = torch.empty((num_clients, *values.shape[1:]), dtype=values.dtype)
                extras[name][positions] = values
        if trained != num_clients:        # every position is claimed exactly once; anything else is a bug
            raise RuntimeError(f"processes backend: {trained} of {num_clients} clients were trained")
        cohort = Cohort(client_ids=work.client_ids, deltas=arena["deltas"][:num_clients].clone(),
                        num_examples=cohort_sizes(task, work.client_ids), local_steps=steps,
                        train_loss=losses, extras=extras)
        new_states = {name: arena[f"new_state/{name}"][:num_clients].clone() for name in work.client_states}
        return cohort, new_states

    def evaluate(self, task: FederatedTask, params: torch.Tensor, *, batch_size: int) -> tuple[float, float]:
        """The engine's evaluation with its forward passes split across the workers (same numbers).
        Before the first round (no pool yet) it evaluates in this process."""
        passes = eval_passes(len(task.test), eval_pass_size(task, params, batch_size))
        pool = self._pool
        if pool is None or pool.task is not task or len(passes) < 2:
            loss_sums, correct = evaluate_passes(task, params, passes)
            return combine_passes(loss_sums, correct, len(task.test))
        pool.arena["params"].copy_(params)
        parts = min(pool.size + 1, len(passes))
        bounds = [round(i * len(passes) / parts) for i in range(parts + 1)]
        requests = {rank: ("eval", passes[bounds[rank]:bounds[rank + 1]]) for rank in range(parts - 1)}
        pool.send(requests)
        own = self._run_locally(pool, evaluate_passes, task, pool.arena["params"], passes[bounds[-2]:])
        replies = pool.collect(requests)
        loss_sums = torch.cat([*(torch.tensor(replies[rank][0], dtype=torch.float64) for rank in requests), own[0]])
        correct = torch.cat([*(torch.tensor(replies[rank][1], dtype=torch.int64) for rank in requests), own[1]])
        return combine_passes(loss_sums, correct, len(task.test))

    def _run_locally(self, pool: WorkerPool, function, *args):
        """The parent's share of a request the workers are working on, with one torch thread as in
        the workers (the caller's count, ``run.threads`` for instance, is restored after): with more,
        the clients this process happens to claim would get other float32 rounding than the workers'.
        If it fails, the pool is shut down (its replies can no longer be matched to a round) and the
        error propagates."""
        caller_threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return function(*args)
        except BaseException:
            pool.close()
            self._pool = None
            raise
        finally:
            torch.set_num_threads(caller_threads)
