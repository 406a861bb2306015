"""What every execution backend does: train a cohort of clients from ``x`` and stack their uploads.

A backend is an object of the :class:`Backend` protocol: a ``name``, ``train_cohort(task, solver,
work) -> (cohort, new_client_states)`` and ``close()`` (release worker processes; nothing for a
backend that trains in this process). It may also have ``evaluate(task, params, batch_size)`` (a
faster evaluation with the same numbers as :func:`fedhet.core.task.evaluate`). Every backend takes its batches, augmentation and dropout streams from the helpers
below, so client ``i`` sees the same examples in round ``t`` whichever backend runs it.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Protocol, runtime_checkable

import torch

from fedhet.client.base import ClientOptions, LocalSolver
from fedhet.client.schedule import LocalPlan, batch_indices, cut_short, plan_local_work
from fedhet.core.cohort import Cohort
from fedhet.core.seeding import derive_seed, torch_generator
from fedhet.core.task import FederatedTask


@dataclasses.dataclass(frozen=True)
class RoundWork:
    """Everything a backend needs to train one round's cohort."""

    round_index: int
    seed: int
    params: torch.Tensor                              # x, [d]
    client_ids: torch.Tensor                          # [K] sorted int64
    client_states: dict[str, torch.Tensor]            # name -> [K, d] rows of the per-client stores
    broadcast: dict[str, torch.Tensor]                # server.broadcast(state): server-side state clients read
    learning_rate: float                              # eta_l for this round (after decay)
    # Client id -> the most local steps it may take this round: the virtual clock's partial work
    # (docs/system.md, "Policies"); None or a missing client = its whole plan.
    step_limits: Optional[dict[int, int]] = None


@runtime_checkable
class Backend(Protocol):
    """What the simulator runs a round's cohort on (module docstring); every backend class of
    ``run.backend`` and the Flower bridge's satisfies it (tests/backends/test_backends_base.py)."""

    name: str

    def train_cohort(self, task: FederatedTask, solver: LocalSolver,
                     work: RoundWork) -> tuple[Cohort, dict[str, torch.Tensor]]:
        """``(cohort, new_client_states)`` with new_client_states name -> [K, d]."""
        ...

    def close(self) -> None:
        """Release what the backend started (worker processes, Ray actors); the run calls it once, at
        its end, whatever ended it."""
        ...


def client_plan(task: FederatedTask, options: ClientOptions, work: RoundWork, client_id: int,
                num_examples: Optional[int] = None) -> LocalPlan:
    """Client ``client_id``'s local work this round; ``num_examples`` is its example count where the
    caller has read it already (the lockstep batch reads every client's offsets at once)."""
    if num_examples is None:
        start, end = task.client_range(client_id)
        num_examples = end - start
    plan = plan_local_work(num_examples, batch_size=options.batch_size, epochs=options.epochs,
                           steps=options.steps, system=options.system, seed=work.seed,
                           round_index=work.round_index, client_id=client_id)
    limit = None if work.step_limits is None else work.step_limits.get(client_id)
    return plan if limit is None else cut_short(plan, limit)


def client_batches(task: FederatedTask, plan: LocalPlan, work: RoundWork, client_id: int,
                   device: Optional[torch.device] = None) -> list[torch.Tensor]:
    """Global example indices of each local step of ``client_id`` (on ``device``, default the
    task's device)."""
    start, end = task.client_range(client_id)
    generator = torch_generator(work.seed, "batches", work.round_index, client_id)
    target = task.device if device is None else torch.device(device)
    batches = [idx + start for idx in batch_indices(end - start, plan, generator)]
    if target.type == "cpu" or not batches:
        return batches
    # One host-to-device copy per client, not one per batch: each copy waits for the GPU's queue.
    return list(torch.cat(batches).to(target).split([len(idx) for idx in batches]))


def augmentation_generator(task: FederatedTask, work: RoundWork, client_id: int) -> torch.Generator | None:
    if task.train_transform is None:
        return None
    return torch_generator(work.seed, "augment", work.round_index, client_id, device=task.device)


def seed_dropout(task: FederatedTask, work: RoundWork, client_id: int) -> None:
    """Dropout draws from torch's global generator; seed it per (round, client) so every backend and
    a resumed run draw the same masks."""
    if task.has_dropout:
        torch.manual_seed(derive_seed(work.seed, "dropout", work.round_index, client_id))


def stack_states(rows: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    if not rows or not rows[0]:
        return {}
    return {name: torch.stack([row[name] for row in rows]) for name in rows[0]}


def slice_states(states: dict[str, Any], k: int) -> dict[str, torch.Tensor]:
    return {name: value[k] for name, value in states.items()}


def on_device(states: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """``states`` on the compute device (per-client stores may live on the CPU, e.g. memory-mapped
    ones, while the task computes on a GPU); a no-op for tensors already there."""
    return {name: value.to(device) for name, value in states.items()}


def cohort_sizes(task: FederatedTask, client_ids: torch.Tensor) -> torch.Tensor:
    """``n_i`` of the cohort's clients, int64 on the CPU."""
    return task.client_sizes[client_ids.cpu()]
