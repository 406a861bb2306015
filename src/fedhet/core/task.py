"""The federated task: model, flat parameter spec, and client data resident on the compute device.

The training set is reordered once so that each client's examples are one contiguous slice
(``client_offsets[i]:client_offsets[i+1]``); a minibatch is an index gather from that slice. No
per-client Dataset, DataLoader or model copy exists (docs/design.md, "Performance model").
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Callable, Iterator, Optional

import torch
import torch.nn.functional as F
from torch import nn

from fedhet.core.dataset import BatchTransform, TensorDataset
from fedhet.core.params import ParamSpec


@dataclasses.dataclass
class FederatedTask:
    model: nn.Module
    spec: ParamSpec
    train: TensorDataset               # client-contiguous order
    client_offsets: torch.Tensor       # [N + 1] int64 on CPU
    test: TensorDataset
    num_classes: int
    device: torch.device
    dtype: torch.dtype
    train_transform: Optional[BatchTransform] = None
    has_dropout: bool = False
    # Mean minibatch loss (outputs, targets) -> scalar. Cross-entropy for classification; tests
    # use a squared loss for problems with a closed-form optimum.
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = F.cross_entropy
    # Bytes of the largest activation per test example (set by eval_pass_size on first use; a
    # function of the model and the input shape, which a task fixes).
    eval_activation_bytes: Optional[int] = dataclasses.field(default=None, init=False, repr=False, compare=False)

    @property
    def num_clients(self) -> int:
        return int(self.client_offsets.numel() - 1)

    @property
    def client_sizes(self) -> torch.Tensor:
        return self.client_offsets[1:] - self.client_offsets[:-1]

    def client_range(self, client_id: int) -> tuple[int, int]:
        return int(self.client_offsets[client_id]), int(self.client_offsets[client_id + 1])


def build_task(model: nn.Module, train: TensorDataset, test: TensorDataset, partition: list[torch.Tensor],
               *, num_classes: int, device: torch.device, dtype: torch.dtype,
               train_transform: Optional[BatchTransform] = None) -> FederatedTask:
    """Reorder ``train`` client by client and move everything to ``device``.

    Inputs that are floating point are cast to ``dtype``; integer inputs (token ids) are kept.
    """
    order = torch.cat([torch.as_tensor(idx, dtype=torch.int64) for idx in partition])
    sizes = torch.tensor([len(idx) for idx in partition], dtype=torch.int64)
    if (sizes == 0).any():
        empty = torch.nonzero(sizes == 0).flatten().tolist()[:10]
        raise ValueError(f"clients {empty} have no training examples; lower partition.num_clients or raise min_size")
    offsets = torch.zeros(len(partition) + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(sizes, 0)

    def place(inputs: torch.Tensor) -> torch.Tensor:
        inputs = inputs.to(device)
        return inputs.to(dtype) if inputs.is_floating_point() else inputs

    model = model.to(device=device, dtype=dtype)
    has_dropout = any(isinstance(m, nn.modules.dropout._DropoutNd) for m in model.modules())
    return FederatedTask(
        model=model, spec=ParamSpec.from_module(model),
        train=TensorDataset(place(train.inputs[order]), train.targets[order].to(device)),
        client_offsets=offsets, test=TensorDataset(place(test.inputs), test.targets.to(device)),
        num_classes=num_classes, device=device, dtype=dtype, train_transform=train_transform,
        has_dropout=has_dropout)


# Evaluation on a CPU feeds the model at most this many bytes of its largest activation per forward
# pass: with batches of 1000 the FedAvg CNN's first feature map (1000 x 32 x 28 x 28 floats, 100 MB)
# streams through memory, and the same 10,000 test images took 1.6x the CPU time they take in
# passes of 64-128 examples, whose activations stay in cache (measured here, one thread). The
# number of examples per pass is a function of the model only, so results are deterministic.
CPU_EVAL_ACTIVATION_BYTES = 8 << 20


@torch.no_grad()
def largest_activation_bytes(task: FederatedTask, params: torch.Tensor) -> int:
    """Bytes of the largest tensor any submodule outputs for one test example (one forward pass)."""
    sizes: list[int] = []

    def record(module: nn.Module, inputs: object, output: object) -> None:
        if isinstance(output, torch.Tensor):
            sizes.append(output.numel() * output.element_size())

    handles = [module.register_forward_hook(record) for module in task.model.modules()]
    try:
        torch.func.functional_call(task.model, task.spec.views(params), (task.test.inputs[:1],))
    finally:
        for handle in handles:
            handle.remove()
    return max(sizes, default=1)


def eval_pass_size(task: FederatedTask, params: torch.Tensor, batch_size: int) -> int:
    """Examples per forward pass: ``batch_size`` on an accelerator; on a CPU at most as many as keep
    the largest activation within :data:`CPU_EVAL_ACTIVATION_BYTES` (at least 16)."""
    if task.device.type != "cpu":
        return batch_size
    # Measuring runs a hooked forward pass, so once per task.
    if task.eval_activation_bytes is None:
        task.eval_activation_bytes = largest_activation_bytes(task, params)
    per_example = task.eval_activation_bytes
    return max(1, min(batch_size, max(16, CPU_EVAL_ACTIVATION_BYTES // max(per_example, 1))))


def eval_passes(num_examples: int, pass_size: int) -> list[tuple[int, int]]:
    """``[start, stop)`` of each forward pass over the test set, in order."""
    return [(start, min(start + pass_size, num_examples)) for start in range(0, num_examples, pass_size)]


@contextlib.contextmanager
def parameters_bound_to(model: nn.Module, views: dict[str, torch.Tensor]) -> Iterator[None]:
    """Within the block, ``model``'s parameters are the tensors ``views`` (name -> tensor); their
    previous storage (e.g. the sequential backend's flat buffers) is restored afterwards.

    One swap for a whole evaluation: ``torch.func.functional_call`` swaps the parameters on every
    call, a cost paid on every forward pass of an evaluation.
    """
    params = dict(model.named_parameters())
    saved = {name: param.data for name, param in params.items()}
    try:
        for name, param in params.items():
            param.data = views[name]
        yield
    finally:
        for name, param in params.items():
            param.data = saved[name]


@torch.inference_mode()
def evaluate_passes(task: FederatedTask, params: torch.Tensor,
                    passes: list[tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per forward pass: the summed cross-entropy (float64) and the number of correct predictions
    (int64), as two CPU tensors of ``len(passes)`` entries.

    The unit of work of :func:`evaluate`; a backend may hand different passes to different worker
    processes and add the results in pass order, which gives exactly the numbers of one process.
    """
    model = task.model
    was_training = model.training
    model.eval()
    loss_sums = torch.zeros(len(passes), dtype=torch.float64, device=task.device)
    correct = torch.zeros(len(passes), dtype=torch.int64, device=task.device)
    inputs, targets = task.test.inputs, task.test.targets
    try:
        with parameters_bound_to(model, task.spec.views(params)):
            for i, (start, stop) in enumerate(passes):
                logits = model(inputs[start:stop])
                pass_targets = targets[start:stop]
                loss_sums[i] = F.cross_entropy(logits, pass_targets, reduction="sum").to(torch.float64)
                correct[i] = (logits.argmax(dim=1) == pass_targets).sum()
    finally:
        model.train(was_training)
    return loss_sums.cpu(), correct.cpu()


def combine_passes(loss_sums: torch.Tensor, correct: torch.Tensor, num_examples: int) -> tuple[float, float]:
    """``(mean loss, accuracy)`` from per-pass sums, added in pass order (float64)."""
    total = 0.0
    for value in loss_sums.tolist():
        total += value
    count = max(num_examples, 1)
    return total / count, int(correct.sum()) / count


def evaluate(task: FederatedTask, params: torch.Tensor, *, batch_size: int = 2000,
             backend: object = None) -> tuple[float, float]:
    """``(mean cross-entropy, accuracy)`` of ``params`` on the test set.

    The test set stays resident on the task's device; each forward pass takes at most
    ``batch_size`` examples (fewer on a CPU, see :func:`eval_pass_size`). When ``backend`` has an
    ``evaluate`` method (the multi-process backend splits the passes across its workers) it is
    used; it returns the same numbers.
    """
    parallel = getattr(backend, "evaluate", None)
    if parallel is not None:
        return parallel(task, params, batch_size=batch_size)
    passes = eval_passes(len(task.test), eval_pass_size(task, params, batch_size))
    loss_sums, correct = evaluate_passes(task, params, passes)
    return combine_passes(loss_sums, correct, len(task.test))
