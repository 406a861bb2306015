"""Per-client evaluation: the global model's accuracy on each client's own data, and its spread.

Options (``docs/experiments.md``, "Per-client evaluation"): ``data.client_test_fraction`` holds out a
seeded slice of each client's partition (removed from its training data); ``run.client_eval_data``
picks that slice (``"holdout"``) or the client's training data (``"train"``);
``run.client_eval_every`` sets how often.

Cost: all clients' examples are one tensor, evaluated in one pass of the global model in the same
forward passes as the test set (:func:`fedhet.core.task.eval_pass_size`); the correct predictions
are then summed per client with one ``index_add_`` over a client-id vector. No loop over clients.

Statistics over the ``N`` clients' accuracies ``a_1..a_N`` (each client weighs the same, whatever its
size): the mean, the population standard deviation (``ddof = 0``), and worst-10% / best-10%: the mean
accuracy of the ``k = ceil(0.1 N)`` clients with the lowest / highest accuracy.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import torch
from torch import nn

from fedhet.core.task import FederatedTask, eval_pass_size, eval_passes, parameters_bound_to
from fedhet.engine.summary import CLIENT_RECORD_KEYS as STAT_KEYS
from fedhet.errors import FedhetError

TAIL_FRACTION = 0.1


class ClientHoldoutError(FedhetError, ValueError):
    """A client has too few examples for the requested held-out fraction."""


def holdout_size(num_examples: int, fraction: float) -> int:
    """Held-out examples of a client with ``num_examples``: ``floor(fraction n)``, at least one when
    ``fraction > 0`` (the ``1e-9`` keeps ``0.3 * 10`` from rounding down to 2)."""
    if fraction <= 0:
        return 0
    return max(1, math.floor(fraction * num_examples + 1e-9))


def split_client_holdout(partition: Sequence[torch.Tensor], fraction: float,
                         seed: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """``(train, held_out)`` index lists: a seeded random ``holdout_size`` slice of each client's indices
    is held out; both keep the partition's order. Every client keeps at least one training example."""
    generator = torch.Generator().manual_seed(seed)
    train, held = [], []
    for client, indices in enumerate(partition):
        indices = torch.as_tensor(indices, dtype=torch.int64)
        size = indices.numel()
        count = holdout_size(size, fraction)
        if count >= size:
            raise ClientHoldoutError(
                f"client {client} has {size} examples, too few to hold out data.client_test_fraction = {fraction} "
                f"and keep one for training; lower the fraction or give clients more data")
        keep = torch.ones(size, dtype=torch.bool)
        keep[torch.randperm(size, generator=generator)[:count]] = False
        train.append(indices[keep])
        held.append(indices[~keep])
    return train, held


@dataclasses.dataclass
class ClientEvalSet:
    """Every client's evaluation examples as one tensor, on the task's device.

    ``client_ids[j]`` is the client of example ``j``; ``counts[i]`` (CPU) the examples of client ``i``.
    """

    inputs: torch.Tensor
    targets: torch.Tensor
    client_ids: torch.Tensor
    counts: torch.Tensor
    source: str

    @property
    def num_clients(self) -> int:
        return int(self.counts.numel())


def _client_ids(counts: torch.Tensor, device: torch.device) -> torch.Tensor:
    return torch.repeat_interleave(torch.arange(counts.numel(), dtype=torch.int64), counts).to(device)


def train_eval_set(task: FederatedTask) -> ClientEvalSet:
    """The clients' training data (the task's client-contiguous training set; no copy)."""
    counts = task.client_sizes.clone()
    return ClientEvalSet(task.train.inputs, task.train.targets, _client_ids(counts, task.device), counts, "train")


def holdout_eval_set(inputs: torch.Tensor, targets: torch.Tensor, held_out: Sequence[torch.Tensor],
                     task: FederatedTask) -> ClientEvalSet:
    """The held-out examples ``held_out[i]`` (indices into ``inputs``/``targets``) of every client ``i``,
    placed like the task's training set (device; floating inputs in the task's dtype)."""
    order = torch.cat([torch.as_tensor(idx, dtype=torch.int64) for idx in held_out])
    counts = torch.tensor([len(idx) for idx in held_out], dtype=torch.int64)
    placed = inputs[order].to(task.device)
    if placed.is_floating_point():
        placed = placed.to(task.dtype)
    return ClientEvalSet(placed, targets[order].to(task.device), _client_ids(counts, task.device), counts, "holdout")


@torch.inference_mode()
def client_accuracies(task: FederatedTask, params: torch.Tensor, eval_set: ClientEvalSet, *,
                      batch_size: int = 2000) -> torch.Tensor:
    """Accuracy of ``params`` on each client's examples, ``[N]`` float64 on the CPU (NaN for a client
    with none). One pass of the model over all examples, then one segment sum per client."""
    model: nn.Module = task.model
    was_training = model.training
    model.eval()
    total = int(eval_set.targets.numel())
    correct = torch.empty(total, dtype=torch.int64, device=task.device)
    try:
        with parameters_bound_to(model, task.spec.views(params)):
            for start, stop in eval_passes(total, eval_pass_size(task, params, batch_size)):
                logits = model(eval_set.inputs[start:stop])
                correct[start:stop] = logits.argmax(dim=1) == eval_set.targets[start:stop]
    finally:
        model.train(was_training)
    per_client = torch.zeros(eval_set.num_clients, dtype=torch.int64, device=task.device)
    per_client.index_add_(0, eval_set.client_ids, correct)
    counts = eval_set.counts.to(torch.float64)
    return per_client.cpu().to(torch.float64) / counts.where(counts > 0, torch.tensor(math.nan, dtype=torch.float64))


def client_accuracy_statistics(accuracies: torch.Tensor, tail: float = TAIL_FRACTION) -> dict[str, float]:
    """Mean, population std, worst-10% and best-10% of the clients' accuracies (the module's rules);
    clients without examples (NaN) are left out."""
    values = accuracies[torch.isfinite(accuracies)].to(torch.float64)
    if values.numel() == 0:
        return {key: math.nan for key in STAT_KEYS}
    ordered = values.sort().values
    k = max(1, math.ceil(tail * values.numel() - 1e-9))
    return {"client_accuracy_mean": float(values.mean()),
            "client_accuracy_std": float(values.std(correction=0)),
            "client_accuracy_worst10": float(ordered[:k].mean()),
            "client_accuracy_best10": float(ordered[-k:].mean())}


def is_client_eval_round(round_number: int, every: int, total_rounds: int) -> bool:
    """Per-client evaluation runs every ``every`` rounds and at the last round; never when ``every`` is 0."""
    return every > 0 and (round_number % every == 0 or round_number == total_rounds)
