"""The whole cohort's MLP minibatch gradients as batched matrix products (the vectorised backend).

For :class:`fedhet.models.mlp.MLP` under ``F.cross_entropy`` (the conditions of
:func:`fedhet.backends.mlp_grad.mlp_model_obstacle`), a step of ``K`` clients at the points
``w [K, d]`` on minibatches ``inputs [K, B, ...]``, ``targets [K, B]`` with per-example weights
``weights [K, B]`` (``1/b`` on a client's ``b`` real examples, 0 on padding; see
:mod:`fedhet.backends.vectorized`) is, per layer ``l`` with ``W_l [K, out, in]`` and ``b_l [K, out]``
read as views of ``w``:

- forward: ``z_l = baddbmm(b_l, h_{l-1}, W_l^T)``, ``h_l = relu(z_l)``; ``p = log_softmax(z_L)``;
  client ``k``'s loss ``L_k = -sum_j weights[k, j] p[k, j, y_kj]``;
- backward: ``gz_L = weights * (exp(p) - onehot(y))``; ``gW_l = gz_l^T h_{l-1}`` (``bmm``),
  ``gb_l = sum_j gz_l``, ``gz_{l-1} = gz_l W_l`` where ``h_{l-1} > 0`` (ReLU's backward).

That is about twenty kernels a step whatever ``K``, against ``torch.func``'s ``vmap(grad(...))``,
whose Python-level transforms cost about 1.6 ms of host time a step whatever the model (0.2 ms here;
``benchmarks/bench_cohort_grad.py`` on a 2-core CPU): on a GPU, where the MLP's kernels take
microseconds, that overhead was the step (docs/design.md, "Performance model"; benchmarks/README.md,
"Claims workload on a GPU"). The gradient is ``d L_k / d w_k``, the quantity the ``vmap`` path
computes, with sums in another order: equal to rounding (``tests/backends/test_backends_mlp_cohort_grad.py``
compares both paths and ``torch.autograd`` in float64).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional, cast

import torch

from fedhet.backends.mlp_grad import mlp_model_obstacle
from fedhet.core.task import FederatedTask

if TYPE_CHECKING:
    from fedhet.models.mlp import MLP

_aten = torch.ops.aten


class CohortMLPGradient:
    """``grad(w, inputs, targets, weights) -> (losses [K], gradients [K, d])`` for the MLP of ``task``."""

    def __init__(self, task: FederatedTask):
        model, spec = cast("MLP", task.model), task.spec
        layers = [*model.hidden_layers, model.output]
        names = {id(param): name for name, param in model.named_parameters()}
        self._names = [(names[id(layer.weight)], names[id(layer.bias)]) for layer in layers]
        self._spec = spec

    def _layers(self, flat: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        views = self._spec.views(flat)
        return [(views[weight], views[bias]) for weight, bias in self._names]

    def __call__(self, w: torch.Tensor, inputs: torch.Tensor, targets: torch.Tensor,
                 weights: torch.Tensor, out: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``out`` (``[K, d]``, rows contiguous): where the gradients are written (a new tensor if None)."""
        num_clients, batch = targets.shape
        layers = self._layers(w)
        grad = torch.empty_like(w) if out is None else out
        grad_layers = self._layers(grad)
        with torch.no_grad():
            h = inputs.reshape(num_clients, batch, -1)
            hidden = [h]                     # the input of every layer
            last = len(layers) - 1
            for i, (weight, bias) in enumerate(layers):
                z = torch.baddbmm(bias.unsqueeze(1), h, weight.transpose(1, 2))
                if i < last:
                    h = torch.relu(z)
                    hidden.append(h)
            log_probs = torch.log_softmax(z, -1)
            picked = log_probs.gather(-1, targets.unsqueeze(-1))                     # [K, B, 1]
            losses = -(picked.squeeze(-1) * weights).sum(1)
            gz = torch.exp(log_probs)
            gz.scatter_add_(-1, targets.unsqueeze(-1), torch.full_like(picked, -1.0))
            gz.mul_(weights.unsqueeze(-1))
            for i in range(last, -1, -1):
                grad_weight, grad_bias = grad_layers[i]
                grad_weight.copy_(torch.bmm(gz.transpose(1, 2), hidden[i]))    # a strided view of grad
                grad_bias.copy_(gz.sum(1))
                if i > 0:
                    gz = _aten.threshold_backward(torch.bmm(gz, layers[i][0]), hidden[i], 0)
        return losses, grad


def cohort_mlp_gradient(task: FederatedTask) -> Optional[CohortMLPGradient]:
    """A :class:`CohortMLPGradient` for ``task``, or None when its model or loss needs ``vmap``."""
    return CohortMLPGradient(task) if mlp_model_obstacle(task) is None else None
