"""A hand-written minibatch gradient for the MLP under cross-entropy: autograd's numbers, bitwise.

For :class:`fedhet.models.mlp.MLP` (``Linear -> ReLU`` per hidden layer, then ``Linear``) and
``task.loss_fn = F.cross_entropy`` with class-index targets, a local step's gradient is a fixed
chain of a dozen kernels. Running autograd for it costs more than the arithmetic on a CPU (graph
construction, ``AccumulateGrad`` adds into the gradient buffer, zeroing that buffer first): on
W-MLP's 32 x 784-200-200-10 step it is about 40% of the step. :class:`MLPGradient` calls the very
ATen kernels autograd calls, with the same operands in the same layouts, so the loss and the
gradient are bitwise those of ``loss_fn(model(inputs), targets).backward()``:

- forward, layer ``l``: ``z_l = addmm(b_l, h_{l-1}, W_l^T)``, ``h_l = relu(z_l)``;
  loss ``nll_loss(log_softmax(z_L, 1), y)`` (mean), as ``F.cross_entropy`` decomposes;
- backward: ``gz_L = log_softmax_backward(nll_loss_backward(1, ...))``; per layer, from the last:
  ``gW_l = gz_l^T h_{l-1}`` (``AddmmBackward``'s weight gradient for a transposed weight operand),
  ``gb_l = sum_0 gz_l``, ``gz_{l-1} = threshold_backward(gz_l W_l, h_{l-1}, 0)`` (ReLU's backward
  on its output); no gradient for the inputs.

The gradients are written (the weights' through a fresh product and a copy, as autograd does;
the biases' with ``out=``) straight into the flat gradient buffer's views, so the buffer needs no
zeroing. One difference that is not a difference in value: where a gradient entry
is ``-0.0`` (a dead ReLU unit times a negative input), autograd's accumulation into the zeroed
buffer gives ``+0.0`` and this class keeps ``-0.0``; the update ``w - eta * g`` is the same number
either way (it differs only in the sign of a weight that is exactly zero).
``tests/backends/test_mlp_grad.py`` checks the equality against autograd (``torch.equal``), also
over whole rounds of every solver. Any other model or loss takes the autograd path
(:func:`mlp_gradient` returns None).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional, cast

import torch
import torch.nn.functional as F

from fedhet.core.task import FederatedTask
from fedhet.models.mlp_step import cross_entropy_and_gradient

if TYPE_CHECKING:
    from fedhet.models.mlp import MLP

_aten = torch.ops.aten


def mlp_model_obstacle(task: FederatedTask) -> Optional[str]:
    """Why ``task``'s model and loss are not the MLP under cross-entropy that the hand-written
    gradients take (this one and :mod:`fedhet.backends.mlp_cohort_grad`), or None."""
    from fedhet.models.mlp import MLP
    model = task.model
    if type(model) is not MLP:
        return "the model is not fedhet's MLP"
    if task.loss_fn is not F.cross_entropy:
        return "the loss is not F.cross_entropy"
    if task.train.targets.dtype != torch.int64:
        return "the targets are not class indices"
    layers = [*model.hidden_layers, model.output]
    if any(layer.bias is None for layer in layers) or not all(p.requires_grad for p in model.parameters()):
        return "a layer has no bias or a frozen parameter"
    return None


def mlp_obstacle(task: FederatedTask) -> Optional[str]:
    """Why ``task`` cannot use :class:`MLPGradient`, or None. Bitwise equality with autograd is
    checked on the CPU's kernels only."""
    reason = mlp_model_obstacle(task)
    if reason is None and task.device.type != "cpu":
        return "the task is not on the CPU"
    return reason


class MLPGradient:
    """``grad(point, inputs, targets) -> loss``: the mean cross-entropy at the flat parameters
    ``point`` ([d], the bound vector ``w`` or any other point) on one minibatch, with the gradient
    written into ``grad`` (the flat buffer given at construction)."""

    def __init__(self, task: FederatedTask, w: torch.Tensor, grad: torch.Tensor):
        # cast: mlp_gradient builds this class only where mlp_obstacle found type(task.model) is MLP.
        model, spec = cast("MLP", task.model), task.spec
        layers = [*model.hidden_layers, model.output]
        names = {id(param): name for name, param in model.named_parameters()}
        # (weight name, bias name) per layer, in forward order.
        self._names = [(names[id(layer.weight)], names[id(layer.bias)]) for layer in layers]
        self._spec = spec
        self._w = w
        self._w_layers = self._layers(w)
        self._g_layers = self._layers(grad)
        self._one = torch.ones((), dtype=w.dtype, device=w.device)

    def _layers(self, flat: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        views = self._spec.views(flat)
        return [(views[weight], views[bias]) for weight, bias in self._names]

    def __call__(self, point: torch.Tensor, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        layers = self._w_layers if point is self._w else self._layers(point)
        with torch.no_grad():
            h = inputs.reshape(inputs.shape[0], -1)
            hidden = [h]                  # the input of every layer
            last = len(layers) - 1
            for i, (weight, bias) in enumerate(layers):
                z = torch.addmm(bias, h, weight.t())
                if i < last:
                    h = torch.relu(z)
                    hidden.append(h)
            loss, gz = cross_entropy_and_gradient(z, targets, self._one)
            for i in range(last, -1, -1):
                grad_weight, grad_bias = self._g_layers[i]
                # Into a fresh tensor, then copied: autograd's own path. MKL's gemm may take another
                # code path for an output at an unaligned address (a view into the flat buffer), and
                # on some CPUs (AMD EPYC) that path sums in another order: not bitwise autograd.
                grad_weight.copy_(torch.mm(gz.t(), hidden[i]))
                torch.sum(gz, 0, out=grad_bias)
                if i > 0:
                    gz = _aten.threshold_backward(gz.mm(layers[i][0]), hidden[i], 0)
        return loss


def mlp_gradient(task: FederatedTask, w: torch.Tensor, grad: torch.Tensor) -> Optional[MLPGradient]:
    """An :class:`MLPGradient` bound to ``w`` and ``grad``, or None if ``task`` needs autograd."""
    return MLPGradient(task, w, grad) if mlp_obstacle(task) is None else None
