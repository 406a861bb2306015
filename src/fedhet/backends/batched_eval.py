"""Several runs' models evaluated on their evaluation sets as one batched computation.

Lockstep runs (docs/design.md, "Lockstep runs") that evaluate at the same moment (the test set, the
validation split, the clients' training data) hand their ``(task, params)`` here. Runs whose
evaluations agree in :func:`eval_key` (the same model, dtype, device, number of examples, example
shape and pass size) take each forward pass together: ``R`` models on the pass's examples, each run
its own examples (or one shared tensor when every run reads the same one).

The numbers are those of :func:`fedhet.core.task.evaluate` for each run alone, with the same
passes: per pass, the summed cross-entropy (computed in the model's dtype, then float64) and the
number of correct predictions, combined in pass order (:func:`fedhet.core.task.combine_passes`).
The logits come from other kernels (batched products, or ``vmap`` over the runs), so the loss sums
agree to rounding, not bitwise (tests/engine/test_engine_lockstep.py: within 1e-9 in float64).

- fedhet's MLP: per layer one batched product over the runs; the first layer, when every run reads
  the same examples, one matrix product of the pass with all the runs' first-layer weights side by
  side ``[in, R * out]``;
- any other model: ``torch.func.vmap`` of ``functional_call`` over the runs' parameters.

The runs are taken in chunks whose largest activation stays within a budget of memory.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Hashable, cast

import torch
import torch.nn.functional as F

from fedhet.backends.mlp_grad import mlp_model_obstacle
from fedhet.core.task import FederatedTask, combine_passes, eval_pass_size, eval_passes

if TYPE_CHECKING:
    from fedhet.models.mlp import MLP

# The largest activation of one chunk of runs on one pass (bytes): the runs of a chunk share a pass.
CHUNK_ACTIVATION_BYTES = 64 * 2 ** 20

Forward = Callable[[torch.Tensor, torch.Tensor, bool], torch.Tensor]
# (params [R, d], inputs [P, ...] shared or [R, P, ...], shared) -> logits [R, P, C]


def eval_key(task: FederatedTask, batch_size: int) -> Hashable:
    """Evaluations with equal keys are computed together (module docstring)."""
    return (task.spec.names, task.spec.shapes, repr(task.model), task.dtype, str(task.device), len(task.test),
            tuple(task.test.inputs.shape[1:]), task.test.inputs.dtype, batch_size)


def _mlp_forward(task: FederatedTask) -> Forward:
    model, spec = cast("MLP", task.model), task.spec
    names = {id(param): name for name, param in model.named_parameters()}
    layer_names = [(names[id(layer.weight)], names[id(layer.bias)]) for layer in [*model.hidden_layers, model.output]]

    def forward(params: torch.Tensor, inputs: torch.Tensor, shared: bool) -> torch.Tensor:
        views = spec.views(params)
        runs = params.shape[0]
        last = len(layer_names) - 1
        h = inputs.reshape(inputs.shape[0], -1) if shared else inputs.reshape(runs, inputs.shape[1], -1)
        for i, (weight_name, bias_name) in enumerate(layer_names):
            weight, bias = views[weight_name], views[bias_name]          # [R, out, in], [R, out]
            if i == 0 and shared:
                side_by_side = weight.reshape(runs * weight.shape[1], weight.shape[2])    # [R * out, in]
                z = torch.addmm(bias.reshape(-1), h, side_by_side.t())                     # [P, R * out]
                z = z.view(h.shape[0], runs, weight.shape[1]).transpose(0, 1)             # [R, P, out]
            else:
                z = torch.baddbmm(bias.unsqueeze(1), h, weight.transpose(1, 2))
            h = torch.relu(z) if i < last else z
        return h

    return forward


def _vmap_forward(task: FederatedTask) -> Forward:
    model, spec = task.model, task.spec

    def one(params: dict[str, torch.Tensor], inputs: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(model, params, (inputs,))

    def forward(params: torch.Tensor, inputs: torch.Tensor, shared: bool) -> torch.Tensor:
        return torch.func.vmap(one, in_dims=(0, None if shared else 0))(spec.views(params), inputs)

    return forward


def batched_forward(task: FederatedTask) -> Forward:
    """The runs' logits: batched products for fedhet's MLP, else ``vmap``."""
    return _mlp_forward(task) if mlp_model_obstacle(task) is None else _vmap_forward(task)


@torch.inference_mode()
def evaluate_runs(tasks: list[FederatedTask], params: list[torch.Tensor], batch_size: int,
                  forward: Forward | None = None) -> list[tuple[float, float]]:
    """Each run's ``(mean cross-entropy, accuracy)`` of ``params[r]`` on ``tasks[r].test``; the tasks
    agree in :func:`eval_key`."""
    first = tasks[0]
    forward = forward or batched_forward(first)
    num_examples = len(first.test)
    passes = eval_passes(num_examples, eval_pass_size(first, params[0], batch_size))
    inputs = [task.test.inputs for task in tasks]
    targets = [task.test.targets for task in tasks]
    shared = all(x is inputs[0] for x in inputs) and all(t is targets[0] for t in targets)
    model = first.model
    was_training = model.training
    model.eval()
    widest = first.eval_activation_bytes or 1
    pass_size = passes[0][1] - passes[0][0] if passes else 1
    chunk = max(1, CHUNK_ACTIVATION_BYTES // max(widest * pass_size, 1))
    results: list[tuple[float, float]] = []
    try:
        for begin in range(0, len(tasks), chunk):
            end = min(begin + chunk, len(tasks))
            stacked = torch.stack([p.to(first.device) for p in params[begin:end]])
            loss_sums = torch.zeros(end - begin, len(passes), dtype=torch.float64, device=first.device)
            correct = torch.zeros(end - begin, len(passes), dtype=torch.int64, device=first.device)
            for i, (start, stop) in enumerate(passes):
                if shared:
                    pass_inputs, pass_targets = inputs[0][start:stop], targets[0][start:stop].expand(end - begin, -1)
                else:
                    pass_inputs = torch.stack([x[start:stop] for x in inputs[begin:end]])
                    pass_targets = torch.stack([t[start:stop] for t in targets[begin:end]])
                logits = forward(stacked, pass_inputs, shared)                          # [R, P, C]
                losses = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), pass_targets.reshape(-1),
                                         reduction="none").view(end - begin, -1)
                loss_sums[:, i] = losses.sum(1).to(torch.float64)
                correct[:, i] = (logits.argmax(dim=-1) == pass_targets).sum(1)
            loss_sums, correct = loss_sums.cpu(), correct.cpu()
            results.extend(combine_passes(loss_sums[r], correct[r], num_examples) for r in range(end - begin))
    finally:
        model.train(was_training)
    return results
