"""Local work plans: how many steps a client takes and which examples each minibatch holds.

Pure functions of (client size, options, generator). Every backend uses them, so all backends see
the same batches for client i in round t.
"""
from __future__ import annotations

import dataclasses
import math

import torch

from fedhet.core.seeding import numpy_generator


@dataclasses.dataclass(frozen=True)
class LocalPlan:
    """What one client does in one round."""

    batch_size: int
    epochs: int      # 0 when a fixed number of steps is used
    num_steps: int


def plan_local_work(num_examples: int, *, batch_size: int, epochs: int, steps: int, system: str,
                    seed: int, round_index: int, client_id: int,
                    hybrid_epochs: tuple[int, int] = (2, 5), hybrid_min_batch: int = 10) -> LocalPlan:
    """The local plan of ``client_id`` in ``round_index``.

    ``system``:
      - ``"fixed"``: ``steps`` local steps if ``steps > 0``, else ``epochs`` passes over the client's
        data (``epochs * ceil(n_i / B)`` steps: with unequal client sizes this is the "Hybrid" setting
        of the FedAWARE gradient-diversity paper, Section 5);
      - ``"hybrid_plus"``: per client and round, epochs ``E ~ U{2..5}`` and batch size
        ``B ~ U{10..|D_i|}`` (the paper's "Hybrid+"), drawn from a stream keyed by (round, client).
    """
    if num_examples <= 0:
        raise ValueError(f"client {client_id} has no training examples")
    if system == "hybrid_plus":
        rng = numpy_generator(seed, "hybrid_plus", round_index, client_id)
        low_e, high_e = hybrid_epochs
        draw_epochs = int(rng.integers(low_e, high_e + 1))
        low_b = min(hybrid_min_batch, num_examples)
        draw_batch = int(rng.integers(low_b, num_examples + 1))
        return LocalPlan(draw_batch, draw_epochs, draw_epochs * math.ceil(num_examples / draw_batch))
    if system != "fixed":
        raise ValueError(f"unknown system heterogeneity {system!r}; allowed: fixed, hybrid_plus")
    batch = min(batch_size, num_examples)
    if steps > 0:
        return LocalPlan(batch, 0, steps)
    return LocalPlan(batch, epochs, epochs * math.ceil(num_examples / batch))


def cut_short(plan: LocalPlan, steps: int) -> LocalPlan:
    """``plan`` stopped after its first ``steps`` local steps (the virtual clock's partial work,
    docs/system.md): the same batches in the same order, fewer of them."""
    if steps >= plan.num_steps:
        return plan
    if steps < 1:
        raise ValueError(f"a cut-short plan needs at least one step, not {steps}")
    return dataclasses.replace(plan, num_steps=steps)


def batch_indices(num_examples: int, plan: LocalPlan, generator: torch.Generator) -> list[torch.Tensor]:
    """Per-step example indices (local to the client), one tensor per step.

    Epoch mode: a fresh permutation per epoch cut into consecutive batches, the last one partial
    (as ``DataLoader(shuffle=True, drop_last=False)``). Step mode: permutations are concatenated
    and cut into ``num_steps`` full batches, so each example is used as evenly as possible. A plan
    cut short (:func:`cut_short`) gets the first ``num_steps`` batches of the whole plan.
    """
    if plan.epochs > 0:
        batches: list[torch.Tensor] = []
        for _ in range(plan.epochs):
            order = torch.randperm(num_examples, generator=generator)
            batches.extend(order.split(plan.batch_size))
        # Epoch mode makes exactly num_steps batches unless the plan was cut short.
        return batches[:plan.num_steps]
    order, sizes = batch_order(num_examples, plan, generator)
    return list(order.split(sizes))


def batch_order(num_examples: int, plan: LocalPlan, generator: torch.Generator) -> tuple[torch.Tensor, list[int]]:
    """:func:`batch_indices` as one tensor, the steps' batches one after another, and each step's
    batch size: the same draws and the same indices, in a few operations whatever the step count
    (the lockstep batches' index, docs/design.md "Lockstep runs")."""
    size = plan.batch_size
    if plan.epochs > 0:
        orders = [torch.randperm(num_examples, generator=generator) for _ in range(plan.epochs)]
        per_epoch = [size] * (num_examples // size) + ([num_examples % size] if num_examples % size else [])
        sizes = (per_epoch * plan.epochs)[:plan.num_steps]
        order = orders[0] if len(orders) == 1 else torch.cat(orders)
        total = sum(sizes)
        # The whole order when no step is cut (no slicing operator for the common case).
        return (order if total == order.numel() else order[:total]), sizes
    needed = plan.num_steps * size
    order = torch.cat([torch.randperm(num_examples, generator=generator)
                       for _ in range(math.ceil(needed / num_examples))])
    return order[:needed], [size] * plan.num_steps
