"""Several runs' cohorts as one computation: the rows of every (run, client) pair in one ``[R*K, d]``.

Lockstep runs (docs/design.md, "Lockstep runs") hand this module one request per run, ``(task,
solver, work)`` as a backend receives it (:class:`fedhet.backends.base.RoundWork`). The requests
whose :func:`lockstep_key` agree (the same parameter layout, model, dtype, device and loss, the same
solver class and the same solver options apart from the local-work options and the solver's
:attr:`~fedhet.client.base.LocalSolver.lockstep_knobs`) train as one batch of ragged rows
(:mod:`fedhet.backends.ragged`: rows in step-count order, only the active rows at each step, one
gradient call per minibatch size, no padded slot), with per-row values where the runs differ:

- the start point ``x``: row ``k`` of run ``r`` starts at run ``r``'s model, ``x [R*K, d]``;
- the local learning rate: a ``[R*K, 1]`` column (:meth:`fedhet.client.base.LocalSolver.step`);
- the solver's knobs (FedProx's ``mu``, ...): ``[R*K, 1]`` columns on a copy of the solver;
- the server's broadcast and the clients' memories: each run's rows;
- minibatches: each run's own plans and batch streams (:func:`fedhet.backends.base.client_batches`),
  copied once per round from each run's data in the order the steps read them; a client's only
  operators of its own are its permutation draws (its offsets, starts and sizes are read or
  computed for the whole batch at once, in integers, so exactly);
- random streams: each row's solver generator is its own run's ``(seed, "solver", round, client)``.

Every row's arithmetic reads only its own row and its own examples, so a run's numbers do not
depend on which runs share its batch, up to the blocking of batched products of another batch
count (tests/engine/test_engine_lockstep.py).
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Callable, Hashable

import torch

from fedhet.backends.base import RoundWork, augmentation_generator, client_plan
from fedhet.backends.ragged import CohortGrad, RaggedBatches, ragged_layout, run_ragged_steps, step_order
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


def _row_solver(requests: list[LockstepRequest], counts: list[int], like: torch.Tensor,
                arrange: Callable[[torch.Tensor], torch.Tensor]) -> LocalSolver:
    """The first request's solver, with each knob the runs do not share as a per-row column (its
    rows put in the batch's order by ``arrange``)."""
    solver = requests[0].solver
    columns = {}
    for knob in type(solver).lockstep_knobs:
        column = _column([getattr(r.solver, knob) for r in requests], counts, like)
        if isinstance(column, torch.Tensor):
            columns[knob] = arrange(column)
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
    """The round's rows in step-count order (``order[p]`` is the request-order row at position
    ``p``) and their ragged batches."""

    order: torch.Tensor
    batches: RaggedBatches
    num_steps: torch.Tensor                 # per row, in request order (CPU int64)
    client_sizes: torch.Tensor              # each row's client's example count, request order (CPU int64)
    examples: int

    @property
    def padding(self) -> tuple[int, int]:
        """``(real examples, computed example slots)`` of the round: equal, as no slot is padding."""
        return self.examples, self.batches.layout.computed_slots


def _round_rows(requests: list[LockstepRequest]) -> _RoundRows:
    """Every row's minibatches in step order (:mod:`fedhet.backends.ragged`), from a round-local copy
    of the examples the round reads.

    Each client's batches come as one tensor (:func:`fedhet.client.schedule.batch_order`, the
    sequential backend's draws); each example's step-ordered position is computed at once. The
    operators that are per client are the random draws alone (each client's permutations from its
    own run's generator): the client offsets are read once per task as numbers, and the clients'
    starts are added to their local indices in one integer addition over the batch (exact, so the
    indices are those of :func:`fedhet.backends.base.client_batches`)."""
    first = requests[0].task
    device = first.device
    offsets_of: dict[int, list[int]] = {}
    orders, starts, sizes_of, batch_sizes, generators, transforms, runs = [], [], [], [], [], [], []
    for r, request in enumerate(requests):
        task, work = request.task, request.work
        offsets = offsets_of.get(id(task))
        if offsets is None:
            offsets = offsets_of[id(task)] = task.client_offsets.tolist()
        for client_id in work.client_ids.tolist():
            start, size = offsets[client_id], offsets[client_id + 1] - offsets[client_id]
            plan = client_plan(task, request.solver.options, work, client_id, num_examples=size)
            order, sizes = batch_order(size, plan, torch_generator(work.seed, "batches", work.round_index, client_id))
            orders.append(order)
            starts.append(start)
            sizes_of.append(size)
            batch_sizes.append(sizes)
            generators.append(augmentation_generator(task, work, client_id))
            transforms.append(task.train_transform)
            runs.append(r)
    num_steps = torch.tensor([len(sizes) for sizes in batch_sizes], dtype=torch.int64)
    order = step_order(num_steps.tolist())
    layout = ragged_layout([batch_sizes[k] for k in order], device)
    row_examples = [int(orders[k].numel()) for k in order]
    total = sum(row_examples)
    per_row = torch.tensor(row_examples, dtype=torch.int64)
    # Each example's index in its run's training data (its client's start plus its local index),
    # and its run, in step order.
    examples = torch.empty(total, dtype=torch.int64)
    local = torch.cat([orders[k] for k in order] or [examples[:0]])
    examples[layout.slot] = local + torch.repeat_interleave(torch.tensor([starts[k] for k in order],
                                                                         dtype=torch.int64), per_row)
    example_run = torch.empty(total, dtype=torch.int64)
    example_run[layout.slot] = torch.repeat_interleave(torch.tensor([runs[k] for k in order], dtype=torch.int64),
                                                       per_row)
    train_sets = [request.task.train for request in requests]
    if all(t.inputs is train_sets[0].inputs and t.targets is train_sets[0].targets for t in train_sets):
        index = examples.to(device)
        inputs, targets = train_sets[0].inputs.index_select(0, index), train_sets[0].targets.index_select(0, index)
    else:
        inputs = torch.empty(total, *first.train.inputs.shape[1:], dtype=first.train.inputs.dtype, device=device)
        targets = torch.empty(total, *first.train.targets.shape[1:], dtype=first.train.targets.dtype, device=device)
        for r, train in enumerate(train_sets):
            positions = torch.nonzero(example_run == r).squeeze(1)
            index = examples[positions].to(device)
            positions = positions.to(device)
            inputs.index_copy_(0, positions, train.inputs.index_select(0, index))
            targets.index_copy_(0, positions, train.targets.index_select(0, index))
    row_transforms = [transforms[k] for k in order]
    row_generators = [generators[k] for k in order]

    def augment(batch: torch.Tensor, row: int) -> torch.Tensor:
        # A row's real batch through its run's transform and its (run, round, client) generator.
        transform, generator = row_transforms[row], row_generators[row]
        return transform(batch, generator) if transform is not None and generator is not None else batch
    augmenting = any(transform is not None for transform in row_transforms)
    batches = RaggedBatches(layout, inputs, targets, augment if augmenting else None)
    return _RoundRows(torch.tensor(order, dtype=torch.int64), batches, num_steps,
                      torch.tensor(sizes_of, dtype=torch.int64), total)


def train_lockstep(requests: list[LockstepRequest], cohort_grad: CohortGrad
                   ) -> tuple[list[tuple[Cohort, dict[str, torch.Tensor]]], tuple[int, int]]:
    """Train the requests (equal :func:`lockstep_key`) as one batch of ragged rows: each run's
    ``(cohort, new_client_states)``, as :meth:`fedhet.backends.base.Backend.train_cohort` returns
    them, and the batch's ``(real examples, computed example slots)``."""
    first = requests[0].task
    device, dtype = first.device, first.dtype
    counts = [int(r.work.client_ids.numel()) for r in requests]
    rows = _round_rows(requests)
    order = rows.order.to(device)

    def sorted_rows(value: torch.Tensor) -> torch.Tensor:
        return value.index_select(0, order)

    x = sorted_rows(_stack_rows([r.work.params for r in requests], counts, device))        # [R*K, d]
    learning_rate = _column([r.work.learning_rate for r in requests], counts, x)
    if isinstance(learning_rate, torch.Tensor):
        learning_rate = sorted_rows(learning_rate)
    solver = _row_solver(requests, counts, x, sorted_rows)
    names = list(requests[0].work.client_states)
    client_states = {name: sorted_rows(torch.cat([r.work.client_states[name].to(device) for r in requests]))
                     for name in names}
    broadcast = {name: sorted_rows(_stack_rows([r.work.broadcast[name] for r in requests], counts, device))
                 for name in requests[0].work.broadcast}
    all_rows = [(r.work.seed, r.work.round_index, client) for r in requests for client in r.work.client_ids.tolist()]
    context = RowsContext([all_rows[k] for k in rows.order.tolist()], device)
    w = x.clone()
    local = begin_client(solver, x, client_states, broadcast, learning_rate, context)
    loss_sum, local = run_ragged_steps(solver, w, x, learning_rate, local, rows.batches, cohort_grad)
    num_steps = rows.num_steps
    steps_sorted = num_steps.index_select(0, rows.order).to(device)
    delta, new_states, extras = solver.finish(x, w, local, client_states, steps_sorted, learning_rate)
    # Back to request order: position p of the sorted rows is request-order row order[p].
    inverse = torch.empty_like(rows.order)
    inverse[rows.order] = torch.arange(rows.order.numel())
    inverse = inverse.to(device)

    def request_rows(value: torch.Tensor) -> torch.Tensor:
        return value.index_select(0, inverse.to(value.device))

    losses = request_rows(loss_sum).cpu() / num_steps.clamp(min=1).to(torch.float64)
    deltas = request_rows(delta.to(dtype)).split(counts)
    parts = {"losses": losses.split(counts), "steps": num_steps.split(counts),
             "sizes": rows.client_sizes.split(counts)}
    states = {name: request_rows(value).split(counts) for name, value in new_states.items()}
    extra_parts = {name: request_rows(value).split(counts) for name, value in extras.items()}
    results = []
    for r, request in enumerate(requests):
        work = request.work
        cohort = Cohort(client_ids=work.client_ids, deltas=deltas[r].contiguous(),
                        num_examples=parts["sizes"][r], local_steps=parts["steps"][r],
                        train_loss=parts["losses"][r], extras={name: value[r] for name, value in extra_parts.items()})
        results.append((cohort, {name: value[r] for name, value in states.items()}))
    return results, rows.padding
