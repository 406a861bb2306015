"""Several runs' cohorts as one computation: the rows of every (run, client) pair in one ``[R*K, d]``.

Lockstep runs (docs/design.md, "Lockstep runs") hand this module one request per run, ``(task,
solver, work)`` as a backend receives it (:class:`fedhet.backends.base.RoundWork`). The requests
whose :func:`lockstep_key` agree (the same parameter layout, model, dtype, device and loss, the same
solver class and the same solver options apart from the local-work options and the solver's
:attr:`~fedhet.client.base.LocalSolver.lockstep_knobs`) train as one cohort of the vectorised
backend (:func:`fedhet.backends.vectorized.run_cohort_steps`), with per-row values where the runs
differ:

- the start point ``x``: row ``k`` of run ``r`` starts at run ``r``'s model, ``x [R*K, d]``;
- the local learning rate: a ``[R*K, 1]`` column (:meth:`fedhet.client.base.LocalSolver.step`);
- the solver's knobs (FedProx's ``mu``, ...): ``[R*K, 1]`` columns on a copy of the solver;
- the server's broadcast and the clients' memories: each run's rows;
- minibatches: each run's own plans and batch streams (:func:`fedhet.backends.base.client_batches`),
  gathered from a round-local copy of the examples the round touches (one ``index_select`` per run
  per round), padded to the batch's largest minibatch and step count as the vectorised backend pads
  a cohort (weights ``1/b`` on real examples, frozen rows after their last step);
- random streams: each row's solver generator is its own run's ``(seed, "solver", round, client)``.

A value the runs share stays a plain number, so a run alone gives the vectorised backend's numbers.
Every row's arithmetic reads only its own row (batched matrix products and row-wise step rules), so
a run's numbers do not depend on which runs share its batch, up to the order of floating-point sums
where the padded shapes differ (tests/engine/test_engine_lockstep.py).
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Any, Hashable, Optional

import torch

from fedhet.backends.base import RoundWork, augmentation_generator, client_plan, cohort_sizes
from fedhet.backends.vectorized import CohortGrad, CohortSteps, run_cohort_steps
from fedhet.client.base import LocalSolver
from fedhet.client.context import ClientContext, begin_client
from fedhet.client.schedule import batch_order
from fedhet.core.cohort import Cohort
from fedhet.core.seeding import torch_generator
from fedhet.core.task import FederatedTask

# Client options that shape the local work (plans, batch streams) or set the learning rate; runs may
# differ in them and still share a batch, since each row is planned from its own run's options.
WORK_OPTIONS = frozenset({"learning_rate", "batch_size", "epochs", "steps", "lr_decay", "lr_step_start",
                          "lr_step_every", "lr_step_factor", "system"})


@dataclasses.dataclass(frozen=True)
class LockstepRequest:
    """One run's round, as its backend receives it."""

    task: FederatedTask
    solver: LocalSolver
    work: RoundWork


def lockstep_key(task: FederatedTask, solver: LocalSolver) -> Hashable:
    """Requests with equal keys train in one batch (module docstring)."""
    options = solver.options
    fixed = tuple((field.name, repr(getattr(options, field.name))) for field in dataclasses.fields(options)
                  if field.name not in WORK_OPTIONS and field.name not in type(solver).lockstep_knobs)
    return (task.spec.names, task.spec.shapes, repr(task.model), task.dtype, str(task.device), task.loss_fn,
            type(solver), fixed, solver.client_state_names)


class RowsContext(ClientContext):
    """:class:`~fedhet.client.context.ClientContext` of rows from several runs: row ``k``'s generator
    is its own run's ``(seed, "solver", round, client)`` stream (``rows[k]``)."""

    def __init__(self, rows: list[tuple[int, int, int]], device: torch.device):
        seed, round_index, _ = rows[0]
        super().__init__(round_index, tuple(client for _, _, client in rows), seed, cohort=True, device=device)
        self.rows = rows

    @property
    def generators(self) -> tuple[torch.Generator, ...]:
        if self._generators is None:
            self._generators = tuple(torch_generator(seed, "solver", round_index, client, device=self.device)
                                     for seed, round_index, client in self.rows)
        return self._generators


def _column(values: list[float], counts: list[int], like: torch.Tensor) -> float | torch.Tensor:
    """One number when every run has it, else the ``[R*K, 1]`` column of each row's run's value."""
    if all(value == values[0] for value in values):
        return values[0]
    per_row = [value for value, count in zip(values, counts) for _ in range(count)]
    return torch.tensor(per_row, dtype=like.dtype, device=like.device).unsqueeze(-1)


def _row_solver(requests: list[LockstepRequest], counts: list[int], like: torch.Tensor) -> LocalSolver:
    """The first request's solver, with each knob the runs do not share as a per-row column."""
    solver = requests[0].solver
    columns = {}
    for knob in type(solver).lockstep_knobs:
        column = _column([getattr(r.solver, knob) for r in requests], counts, like)
        if isinstance(column, torch.Tensor):
            columns[knob] = column
    if not columns:
        return solver
    rows = copy.copy(solver)
    for knob, column in columns.items():
        setattr(rows, knob, column)
    return rows


def _stack_rows(values: list[torch.Tensor], counts: list[int], device: torch.device) -> torch.Tensor:
    """Each run's value (one per run, e.g. a broadcast ``[d]``) repeated over that run's rows."""
    stacked = torch.stack(values).to(device)
    return stacked.repeat_interleave(torch.tensor(counts, device=device), dim=0)


@dataclasses.dataclass
class _RoundRows:
    steps: CohortSteps
    batch_sizes: list[list[int]]              # per row: each step's real batch size
    generators: list[Optional[torch.Generator]]
    transforms: list[Any]

    @property
    def padding(self) -> tuple[int, int]:
        """``(real examples, example slots)`` of the padded round: what padding costs."""
        index = self.steps.index
        return sum(sum(sizes) for sizes in self.batch_sizes), int(index.numel())


def _row_ranges(requests: list[LockstepRequest]) -> list[tuple[int, int]]:
    """Each request's rows ``[a, b)`` of the batch (rows are ordered by request, then client)."""
    ranges, start = [], 0
    for request in requests:
        count = int(request.work.client_ids.numel())
        ranges.append((start, start + count))
        start += count
    return ranges


def _round_rows(requests: list[LockstepRequest]) -> _RoundRows:
    """Every row's padded minibatches, indexing a round-local copy of the examples the round reads.

    The index is built in a few operations whatever the number of rows and steps: each client's
    batches come as one tensor (:func:`fedhet.client.schedule.batch_order`, the sequential backend's
    draws), and every example's slot ``(step, row, position)`` is computed at once."""
    first = requests[0].task
    orders, batch_sizes, generators, transforms, offsets = [], [], [], [], []
    for request in requests:
        task, work = request.task, request.work
        for client_id in work.client_ids.tolist():
            plan = client_plan(task, request.solver.options, work, client_id)
            start, end = task.client_range(client_id)
            order, sizes = batch_order(end - start, plan, torch_generator(work.seed, "batches", work.round_index,
                                                                          client_id))
            orders.append(order)
            batch_sizes.append(sizes)
            offsets.append(start)
            generators.append(augmentation_generator(task, work, client_id))
            transforms.append(task.train_transform)
    num_rows = len(batch_sizes)
    num_steps = torch.tensor([len(sizes) for sizes in batch_sizes], dtype=torch.int64)
    max_steps = int(num_steps.max()) if num_rows else 0
    max_batch = max((size for sizes in batch_sizes for size in sizes), default=1)
    # Each batch's (row, step, size) in row-major order, and each example's slot in [S, rows, B].
    batch_row, batch_step, flat_sizes = [], [], []
    for k, sizes in enumerate(batch_sizes):
        batch_row.extend([k] * len(sizes))
        batch_step.extend(range(len(sizes)))
        flat_sizes.extend(sizes)
    sizes_t = torch.tensor(flat_sizes, dtype=torch.int64)
    examples = torch.cat(orders) + torch.repeat_interleave(
        torch.tensor(offsets, dtype=torch.int64), torch.tensor([sum(sizes) for sizes in batch_sizes]))
    batch_base = (torch.tensor(batch_step) * num_rows + torch.tensor(batch_row)) * max_batch
    batch_first = torch.cumsum(sizes_t, 0) - sizes_t
    slot = torch.repeat_interleave(batch_base - batch_first, sizes_t) + torch.arange(examples.numel())
    # The round's examples in that order, each run's gathered from its own data with one index_select;
    # a slot's index is its example's position there (padding points at position 0, weight 0).
    index = torch.zeros(max_steps, num_rows, max_batch, dtype=torch.int64)
    weight = torch.zeros(max_steps, num_rows, max_batch, dtype=first.dtype)
    index.view(-1)[slot] = torch.arange(examples.numel())
    weight.view(-1)[slot] = torch.repeat_interleave(1.0 / sizes_t.to(first.dtype), sizes_t)
    run_examples = [sum(sum(sizes) for sizes in batch_sizes[a:b]) for a, b in _row_ranges(requests)]
    inputs, targets = [], []
    for request, part in zip(requests, examples.split(run_examples)):
        part = part.to(request.task.device)
        inputs.append(request.task.train.inputs.index_select(0, part))
        targets.append(request.task.train.targets.index_select(0, part))
    device = first.device
    steps = CohortSteps(index.to(device), weight.to(device), num_steps, torch.cat(inputs), torch.cat(targets))
    return _RoundRows(steps, batch_sizes, generators, transforms)


def train_lockstep(requests: list[LockstepRequest], cohort_grad: CohortGrad
                   ) -> tuple[list[tuple[Cohort, dict[str, torch.Tensor]]], tuple[int, int]]:
    """Train the requests (equal :func:`lockstep_key`) as one cohort: each run's ``(cohort,
    new_client_states)``, as :meth:`fedhet.backends.base.Backend.train_cohort` returns them, and
    the batch's ``(real examples, padded example slots)``."""
    first = requests[0].task
    device, dtype = first.device, first.dtype
    counts = [int(r.work.client_ids.numel()) for r in requests]
    rows = _round_rows(requests)
    x = _stack_rows([r.work.params for r in requests], counts, device)                     # [R*K, d]
    learning_rate = _column([r.work.learning_rate for r in requests], counts, x)
    solver = _row_solver(requests, counts, x)
    names = list(requests[0].work.client_states)
    client_states = {name: torch.cat([r.work.client_states[name].to(device) for r in requests]) for name in names}
    broadcast = {name: _stack_rows([r.work.broadcast[name] for r in requests], counts, device)
                 for name in requests[0].work.broadcast}
    context = RowsContext([(r.work.seed, r.work.round_index, client) for r in requests
                           for client in r.work.client_ids.tolist()], device)
    if any(transform is not None for transform in rows.transforms):
        def augment(inputs: torch.Tensor, s: int, active_list: list[bool]) -> None:
            for k, is_active in enumerate(active_list):
                transform, generator = rows.transforms[k], rows.generators[k]
                if is_active and transform is not None and generator is not None:
                    size = rows.batch_sizes[k][s]
                    inputs[k, :size] = transform(inputs[k, :size], generator)
        rows.steps.augment = augment
    w = x.clone()
    local = begin_client(solver, x, client_states, broadcast, learning_rate, context)
    loss_sum = run_cohort_steps(solver, w, x, learning_rate, local, rows.steps, cohort_grad)
    num_steps = rows.steps.num_steps
    delta, new_states, extras = solver.finish(x, w, local, client_states, num_steps.to(device), learning_rate)
    losses = loss_sum.cpu() / num_steps.clamp(min=1).to(torch.float64)
    deltas = delta.to(dtype).split(counts)
    parts = {"losses": losses.split(counts), "steps": num_steps.split(counts)}
    states = {name: value.split(counts) for name, value in new_states.items()}
    extra_parts = {name: value.split(counts) for name, value in extras.items()}
    results = []
    for r, request in enumerate(requests):
        work = request.work
        cohort = Cohort(client_ids=work.client_ids, deltas=deltas[r].contiguous(),
                        num_examples=cohort_sizes(request.task, work.client_ids), local_steps=parts["steps"][r],
                        train_loss=parts["losses"][r], extras={name: value[r] for name, value in extra_parts.items()})
        results.append((cohort, {name: value[r] for name, value in states.items()}))
    return results, rows.padding
