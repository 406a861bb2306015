"""Ragged local steps: rows of ``w [K, d]`` with unequal step counts and minibatch sizes, no padding.

Lockstep runs (docs/design.md, "Lockstep runs") train many (run, client) rows at once, and their
clients differ in how many local steps they take and in the size of each minibatch (the last,
partial minibatch of an epoch; Hybrid+'s per-client ``B``; runs of different ``client.batch_size``).
Padding every row to the longest client and the largest minibatch costs example slots that carry
no example (2.5x the real examples on a Dir(0.1) partition). Here no slot is padding:

- **Rows in step-count order.** The rows are sorted by their step count, longest first (stable), so
  the rows still training at step ``s`` are always a prefix ``[0, n_s)`` and a step computes only
  them: ``w[:n_s]``, the start points, learning rates, solver knobs and the per-row entries of the
  solver's local context are views of that prefix (no gather). A row that has finished is not
  touched again; its local entries are kept aside and put back, in row order, for ``finish``.
- **Groups of equal minibatch size.** Within a step, the active rows are grouped by their real
  minibatch size ``b``; each group's gradient is one call of the cohort gradient on ``[g, b, ...]``
  with weights ``1/b`` (the mean loss of the real batch). A group whose rows are consecutive reads
  its rows of ``w`` as a view, any other gathers them; the gradients are written into one ``[n_s, d]``.
- **One gradient buffer.** The groups' gradients are written into one ``[n_s, d]`` (the cohort
  gradient's ``out``), the first rows of a buffer kept for the round when the solver does not keep
  its gradients (:attr:`fedhet.client.base.LocalSolver.keeps_gradient` False), else a new tensor
  per call (the gradient contract, :data:`fedhet.client.base.GradFn`).
- **Examples in step order.** The round's examples are laid out in the order the steps read them
  (step, group, row, position), so each group's minibatch is a contiguous slice of one round-local
  copy: no gather per step.

Each row's arithmetic reads only its row and its own ``b`` examples, so its numbers do not depend
on the rows beside it (up to the kernels' blocking of a batched product of another batch count).
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Any, Callable, Optional

import torch

from fedhet.backends.vectorized import CohortGrad
from fedhet.client.base import LocalSolver
from fedhet.client.context import ClientContext

Rows = slice | torch.Tensor


@dataclasses.dataclass(frozen=True)
class Group:
    """The rows of one step that share a minibatch size ``size``: ``rows`` (a slice of the active
    prefix, or the row positions), ``members`` (the row positions as a list) and ``start`` (the
    offset of their ``len(members) * size`` examples in the round's step-ordered examples)."""

    size: int
    rows: Rows
    members: tuple[int, ...]
    start: int


@dataclasses.dataclass(frozen=True)
class RaggedStep:
    active: int                 # rows [0, active) take this step
    groups: tuple[Group, ...]

    @property
    def whole(self) -> bool:
        """One group of every active row, in order: the gradient needs no assembly."""
        return len(self.groups) == 1 and self.groups[0].rows == slice(0, self.active)


@dataclasses.dataclass
class RaggedLayout:
    """A round's ragged schedule for rows already in step-count order (:func:`ragged_layout`):
    ``steps``, and ``slot [E]``, the step-ordered position of each example of the rows' batches
    concatenated row by row, batch by batch."""

    steps: list[RaggedStep]
    slot: torch.Tensor

    @property
    def computed_slots(self) -> int:
        return sum(len(group.members) * group.size for step in self.steps for group in step.groups)


def step_order(num_steps: list[int]) -> list[int]:
    """Row indices sorted by step count, longest first (stable: equal counts keep their order)."""
    return sorted(range(len(num_steps)), key=lambda k: -num_steps[k])


def _rows(members: list[int], device: torch.device) -> Rows:
    first = members[0]
    if members == list(range(first, first + len(members))):
        return slice(first, first + len(members))
    return torch.tensor(members, dtype=torch.int64, device=device)


def ragged_layout(batch_sizes: list[list[int]], device: torch.device) -> RaggedLayout:
    """The schedule of rows whose step ``s`` has ``batch_sizes[k][s]`` examples; the rows must be in
    step-count order (:func:`step_order`). Groups of a step are ordered by size, largest first; the
    row positions of a group that is not a slice are on ``device``."""
    num_rows = len(batch_sizes)
    first_batch, batch_start, total = [], [], 0
    for sizes in batch_sizes:
        first_batch.append(len(batch_start))
        for size in sizes:
            batch_start.append(total)
            total += size
    destination = [0] * len(batch_start)
    steps: list[RaggedStep] = []
    cursor, active = 0, num_rows
    max_steps = len(batch_sizes[0]) if num_rows else 0
    for s in range(max_steps):
        while active and len(batch_sizes[active - 1]) <= s:
            active -= 1
        by_size: dict[int, list[int]] = {}
        for k in range(active):
            by_size.setdefault(batch_sizes[k][s], []).append(k)
        groups = []
        for size in sorted(by_size, reverse=True):
            members = by_size[size]
            groups.append(Group(size, _rows(members, device), tuple(members), cursor))
            for k in members:
                destination[first_batch[k] + s] = cursor
                cursor += size
        steps.append(RaggedStep(active, tuple(groups)))
    flat_sizes = torch.tensor([size for sizes in batch_sizes for size in sizes], dtype=torch.int64)
    shift = torch.tensor(destination, dtype=torch.int64) - torch.tensor(batch_start, dtype=torch.int64)
    slot = torch.repeat_interleave(shift, flat_sizes) + torch.arange(total, dtype=torch.int64)
    return RaggedLayout(steps, slot)


@dataclasses.dataclass
class RaggedBatches:
    """A round's step-ordered examples (``inputs [E, ...]``, ``targets [E]``) for a
    :class:`RaggedLayout`, and ``augment(inputs [b, ...], row) -> inputs``, the row's transform of
    its real batch (None: no augmentation)."""

    layout: RaggedLayout
    inputs: torch.Tensor
    targets: torch.Tensor
    augment: Optional[Callable[[torch.Tensor, int], torch.Tensor]] = None


def _take(value: torch.Tensor, rows: Rows) -> torch.Tensor:
    return value[rows] if isinstance(rows, slice) else value.index_select(0, rows)


class PrefixContext(ClientContext):
    """A cohort context's first ``active`` rows: the same generators, whose streams go on."""

    def __init__(self, parent: ClientContext, active: int):
        super().__init__(parent.round_index, parent.client_ids[:active], parent.seed, cohort=True,
                         device=parent.device)
        self.parent, self.active = parent, active

    @property
    def generators(self) -> tuple[torch.Generator, ...]:
        return self.parent.generators[:self.active]


class _PrefixLocal:
    """The solver's local context restricted to the active prefix: the entries with one row per
    row of the batch (leading dimension ``K`` at the start) become views of their first ``n`` rows
    as ``n`` shrinks; the rows left behind are kept aside and put back by :meth:`full`."""

    def __init__(self, local: dict[str, Any], num_rows: int):
        self.local = dict(local)
        self.row_keys = [key for key, value in local.items()
                         if isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == num_rows]
        self.origin = {key: local[key] for key in self.row_keys}
        self.kept: list[dict[str, torch.Tensor]] = []
        self.active = num_rows

    def shrink(self, active: int) -> None:
        if active == self.active:
            return
        self.kept.append({key: self.local[key][active:] for key in self.row_keys})
        for key in self.row_keys:
            self.local[key] = self.local[key][:active]
        for key, value in self.local.items():
            if isinstance(value, ClientContext) and value.cohort:
                self.local[key] = PrefixContext(getattr(value, "parent", value), active)
        self.active = active

    def full(self) -> dict[str, Any]:
        """Every row's entries, in row order (the entries a step changed in place are the original
        tensors themselves)."""
        full = dict(self.local)
        for key, value in full.items():
            if isinstance(value, PrefixContext):
                full[key] = value.parent
        if not self.kept:
            return full
        for key in self.row_keys:
            pieces = [self.local[key], *[kept[key] for kept in reversed(self.kept)]]
            full[key] = self.origin[key] if _are_rows_of(pieces, self.origin[key]) else torch.cat(pieces)
        return full


def _are_rows_of(pieces: list[torch.Tensor], origin: torch.Tensor) -> bool:
    """Whether ``pieces`` are, in order, views of consecutive rows of ``origin`` covering it."""
    start = 0
    for piece in pieces:
        if (piece.dtype != origin.dtype or piece.stride() != origin.stride() or start >= origin.shape[0]
                or piece.data_ptr() != origin[start].data_ptr()):
            return False
        start += piece.shape[0]
    return start == origin.shape[0]


def _prefix_solver(solver: LocalSolver, knobs: dict[str, torch.Tensor], active: int) -> LocalSolver:
    if not knobs:
        return solver
    rows = copy.copy(solver)
    for knob, column in knobs.items():
        setattr(rows, knob, column[:active])
    return rows


def run_ragged_steps(solver: LocalSolver, w: torch.Tensor, x: torch.Tensor, learning_rate: float | torch.Tensor,
                     local: dict[str, Any], batches: RaggedBatches, cohort_grad: CohortGrad
                     ) -> tuple[torch.Tensor, dict[str, Any]]:
    """The local steps of the rows of ``w [K, d]`` (in step-count order), in place, as the module
    docstring says; returns each row's loss sum ``[K]`` (float64) over its own steps and the local
    context of every row after the steps (for ``solver.finish``). ``x`` is ``[K, d]``;
    ``learning_rate`` one number or a ``[K, 1]`` column; a per-row solver knob is a ``[K, 1]``
    column attribute (the solver's ``lockstep_knobs``)."""
    num_rows = w.shape[0]
    device = w.device
    loss_sum = torch.zeros(num_rows, dtype=torch.float64, device=device)
    knobs = {knob: getattr(solver, knob) for knob in type(solver).lockstep_knobs
             if isinstance(getattr(solver, knob), torch.Tensor)}
    prefix = _PrefixLocal(local, num_rows)
    weights: dict[tuple[int, int], torch.Tensor] = {}
    buffer = None if type(solver).keeps_gradient else torch.empty_like(w)
    inputs_all, targets_all = batches.inputs, batches.targets
    step_solver, active = solver, num_rows
    for step in batches.layout.steps:
        if step.active != active:
            active = step.active
            prefix.shrink(active)
            step_solver = _prefix_solver(solver, knobs, active)
        parts = []
        for group in step.groups:
            count, size = len(group.members), group.size
            stop = group.start + count * size
            inputs = inputs_all[group.start:stop].view(count, size, *inputs_all.shape[1:])
            if batches.augment is not None:
                for i, k in enumerate(group.members):
                    inputs[i] = batches.augment(inputs[i], k)
            targets = targets_all[group.start:stop].view(count, size, *targets_all.shape[1:])
            weight = weights.get((count, size))
            if weight is None:
                weight = weights[(count, size)] = torch.full((count, size), 1.0 / size, dtype=w.dtype, device=device)
            parts.append((group.rows, inputs, targets, weight))
        whole = step.whole

        def grad_fn(point: torch.Tensor, parts=parts, whole=whole) -> tuple[torch.Tensor, torch.Tensor]:
            grad = buffer[:point.shape[0]] if buffer is not None else torch.empty_like(point)
            if whole:
                _, inputs, targets, weight = parts[0]
                losses, _ = cohort_grad(point, inputs, targets, weight, out=grad)
                return losses, grad
            losses = torch.empty(point.shape[0], dtype=point.dtype, device=point.device)
            for rows, inputs, targets, weight in parts:
                if isinstance(rows, slice):
                    losses[rows], _ = cohort_grad(point[rows], inputs, targets, weight, out=grad[rows])
                else:
                    group_losses, group_grad = cohort_grad(_take(point, rows), inputs, targets, weight)
                    losses.index_copy_(0, rows, group_losses)
                    grad.index_copy_(0, rows, group_grad)
            return losses, grad

        rate = learning_rate[:active] if isinstance(learning_rate, torch.Tensor) else learning_rate
        loss = step_solver.step(w[:active], x[:active], grad_fn, rate, prefix.local)
        loss_sum[:active] += loss.to(torch.float64)
    return loss_sum, prefix.full()
