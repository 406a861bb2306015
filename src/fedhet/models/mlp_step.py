"""One local SGD-type step of the MLP (or logistic regression) under cross-entropy, with no autograd
graph: forward, backward and the update of the flat parameter vector, layer by layer, in place.

The kernels and their operands are those of the sequential backend's hand-written gradient
(:mod:`fedhet.backends.mlp_grad`, which calls the ATen kernels autograd calls), so the loss and every
layer's gradient are bitwise the same. What this step does not do is what that gradient's caller
does around it: it writes no flat gradient buffer (each layer's weight and bias gradients go into a
scratch buffer of the layer's own, allocated once, instead of a fresh product copied into the flat
buffer), and it updates each layer as soon as its gradients are known (after the product that
carries the gradient back to the layer below has read the old weights), instead of one update of the
whole flat vector at the end. Both are bitwise the same numbers:

- the weight gradient's matrix product writes into a scratch buffer that starts at an allocation
  of its own, as a fresh product's output does (the output's address decides which code path MKL
  takes, hence the order of its sums: benchmarks/README.md, "The fused local step");
- the update ``w -= eta d`` is elementwise (``add_`` with ``alpha = -eta``), so running it on each
  layer's contiguous ``[weight, bias]`` segment of the flat vector computes every entry as the
  whole vector's update does.

The direction ``d`` of a layer is the gradient with the local solver's elementwise terms added on
that segment (weight decay, FedProx's pull, ...): the ``rule`` of :meth:`MLPStep.__call__`.
"""
from __future__ import annotations

from typing import Callable, Optional, cast

import torch
import torch.nn.functional as F
from torch import nn

from fedhet.core.params import ParamSpec
from fedhet.models.logreg import LogisticRegression
from fedhet.models.mlp import MLP

_aten = torch.ops.aten
_MEAN = 1             # at::Reduction::Mean
_IGNORE_INDEX = -100  # F.cross_entropy's default

SegmentRule = Callable[[torch.Tensor, torch.Tensor, slice], torch.Tensor]
"""``rule(grad, w, part) -> direction`` on one layer's segment ``part`` of the flat vector: ``grad``
and ``w`` are that segment's gradient and parameters (1-D, ``w`` a view of the flat vector); the
step then applies ``w -= eta * direction``. ``grad`` is a scratch buffer the rule may return as is."""


def cross_entropy_and_gradient(logits: torch.Tensor, targets: torch.Tensor,
                               one: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, d loss / d logits)`` of the mean ``F.cross_entropy(logits, targets)`` (class indices)
    by the kernels autograd calls for it: ``nll_loss(log_softmax(logits, 1), targets)`` forward, then
    ``log_softmax_backward(nll_loss_backward(one, ...))``; ``one`` is a scalar 1 in the logits' dtype."""
    log_probs = torch.log_softmax(logits, 1)
    loss, total_weight = _aten.nll_loss_forward(log_probs, targets, None, _MEAN, _IGNORE_INDEX)
    grad_log_probs = _aten.nll_loss_backward(one, log_probs, targets, None, _MEAN, _IGNORE_INDEX, total_weight)
    return loss, _aten._log_softmax_backward_data(grad_log_probs, log_probs, 1, logits.dtype)


def linear_layers(model: nn.Module) -> Optional[list[nn.Linear]]:
    """The linear layers, in forward order, of a model this step computes (fedhet's MLP, ReLU
    between layers, or its logistic regression), or None for any other model."""
    if type(model) is MLP:
        return [*cast("list[nn.Linear]", list(model.hidden_layers)), model.output]
    if type(model) is LogisticRegression:
        return [model.linear]
    return None


def step_obstacle(model: nn.Module, spec: ParamSpec, loss_fn: object) -> Optional[str]:
    """Why :class:`MLPStep` cannot run ``model`` (with parameters laid out by ``spec``) under
    ``loss_fn``, or None."""
    layers = linear_layers(model)
    if layers is None:
        return "the model is not fedhet's MLP or logistic regression"
    if loss_fn is not F.cross_entropy:
        return "the loss is not F.cross_entropy"
    if any(layer.bias is None for layer in layers) or not all(p.requires_grad for p in model.parameters()):
        return "a layer has no bias or a frozen parameter"
    names = {id(param): name for name, param in model.named_parameters()}
    for layer in layers:
        weight = spec.names.index(names[id(layer.weight)])
        bias = spec.names.index(names[id(layer.bias)])
        if spec.offsets[bias] != spec.offsets[weight] + spec.numel(weight):
            return "a layer's weight and bias are not adjacent in the flat vector"
    return None


class MLPStep:
    """``step(inputs, targets, learning_rate, rule) -> loss``: one step on the flat parameters ``w``
    (the ``[d]`` vector given at construction, updated in place) for one minibatch; returns the mean
    cross-entropy at the parameters before the step. Build it only where :func:`step_obstacle` is
    None; ``targets`` are class indices."""

    def __init__(self, model: nn.Module, spec: ParamSpec, w: torch.Tensor):
        layers = linear_layers(model)
        if layers is None:
            raise ValueError("MLPStep needs fedhet's MLP or logistic regression")
        names = {id(param): name for name, param in model.named_parameters()}
        views = spec.views(w)
        # Per layer, in forward order: (W^T, W, b, the [weight, bias] segment of w and its slice,
        # the scratch buffer of the segment's gradient with its weight and bias views).
        self._layers = []
        for layer in layers:
            weight, bias = views[names[id(layer.weight)]], views[names[id(layer.bias)]]
            start = spec.offsets[spec.names.index(names[id(layer.weight)])]
            part = slice(start, start + weight.numel() + bias.numel())
            scratch = torch.empty(part.stop - part.start, dtype=w.dtype, device=w.device)
            grad_weight = scratch[:weight.numel()].view(weight.shape)
            grad_bias = scratch[weight.numel():]
            self._layers.append((weight.t(), weight, bias, w[part], part, scratch, grad_weight, grad_bias))
        self._one = torch.ones((), dtype=w.dtype, device=w.device)

    def __call__(self, inputs: torch.Tensor, targets: torch.Tensor, learning_rate: float,
                 rule: SegmentRule) -> torch.Tensor:
        layers = self._layers
        last = len(layers) - 1
        h = inputs.reshape(inputs.shape[0], -1)
        hidden = [h]                      # the input of every layer
        z = h
        for i, layer in enumerate(layers):
            z = torch.addmm(layer[2], h, layer[0])
            if i < last:
                h = torch.relu_(z)        # z is read by nothing else
                hidden.append(h)
        loss, gz = cross_entropy_and_gradient(z, targets, self._one)
        for i in range(last, -1, -1):
            _, weight, _, segment, part, scratch, grad_weight, grad_bias = layers[i]
            torch.mm(gz.t(), hidden[i], out=grad_weight)
            torch.sum(gz, 0, out=grad_bias)
            if i > 0:
                # The gradient for the layer below reads this layer's weights before their update.
                gz = _aten.threshold_backward(gz.mm(weight), hidden[i], 0)
            segment.add_(rule(scratch, segment, part), alpha=-learning_rate)
        return loss
