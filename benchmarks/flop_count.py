"""FLOPs of local training and evaluation, counted per layer of the model (the cost model of
``benchmarks/claims_cost.py``; benchmarks/README.md, "The cost model").

**What is counted: the matrix products, nothing else.** A linear layer ``y = x W^T + b`` with ``W`` of
``[out, in]`` on a batch of ``m`` rows costs, by the ``2 m n k`` rule of a product:

- forward: ``2 * m * in * out``;
- backward, weight gradient ``dW = dy^T x``: ``2 * m * in * out``, for every layer;
- backward, input gradient ``dx = dy W``: ``2 * m * in * out``, for every layer **but the first**: the
  first layer's input is the data, which needs no gradient (autograd skips it, and so does fedhet's
  batched MLP gradient).

So a forward-and-backward pass is not 3x the forward: the first layer costs 2x its forward, the others
3x. In fedhet's MLP (784-200-200-10) the first layer holds 79% of the weights, and a pass is 2.21x the
forward (439,600 against 198,800 multiply-adds an example): counting 3x overstates it by 36%.
Bias adds and bias gradients, ReLU and its mask, softmax and the loss, gradient clipping, the solvers'
vector arithmetic and the parameter update are elementwise and are **not** counted (each is O(m * out)
or O(d) per step, against O(m * d) for the products: about 1-2% of the products at batch 16 and less
at larger batches); their time is what separates the floor from the measured step.

**Gradients per local step.** A solver's step calls ``grad_fn`` (a forward and a backward on the step's
batch) once or more (``fedhet.client.base.GradFn``); :data:`GRADIENTS_PER_STEP` says how often for each
registered local solver and why, read from its ``direction`` (tests/benchmarks check the table against
a counted call of every registered solver).

**Evaluation** is forward passes only (``torch.inference_mode``), ``2 * m * in * out`` per layer.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import torch
from torch import nn

# Local solver (CLIENT_SOLVERS name) -> (grad_fn calls per local step, why; read from its direction()).
GRADIENTS_PER_STEP: dict[str, tuple[int, str]] = {
    "sgd": (1, "LocalSolver.direction: one gradient at w"),
    "fedprox": (1, "FedProxSolver.direction: the gradient at w plus mu (w - x), elementwise"),
    "scaffold": (1, "ScaffoldSolver.direction: the gradient at w plus the control-variate correction"),
    "feddyn": (1, "FedDynSolver.direction: the gradient at w plus the linear and quadratic terms"),
    "fedadmm": (1, "FedADMMSolver.direction: the gradient at w plus the dual and penalty terms"),
    "fedcm": (1, "FedCMSolver.direction: the gradient at w mixed with the server momentum"),
    "fedsam": (2, "FedSAMSolver.direction: the gradient at w, then the gradient at the ascent point w + rho g/|g|"),
    "fedspeed": (2, "FedSpeedSolver.quasi_gradient: the gradient at w, then the gradient at the ascent point "
                    "w + rho0 g/|g| (the perturbed quasi-gradient)"),
}


def gradients_per_step(solver: str) -> int:
    """``grad_fn`` calls per local step of the registered local solver ``solver``."""
    if solver not in GRADIENTS_PER_STEP:
        raise KeyError(f"no gradient count for local solver {solver!r}: add it to GRADIENTS_PER_STEP "
                       "(benchmarks/flop_count.py) from its direction()")
    return GRADIENTS_PER_STEP[solver][0]


@dataclasses.dataclass(frozen=True)
class Linear:
    """One counted layer: ``[in, out]`` and whether its input is the data (the first layer)."""

    fan_in: int
    fan_out: int
    first: bool


def linear_layers(model: nn.Module) -> list[Linear]:
    """The model's ``nn.Linear`` layers in forward order, the first marked as reading the data.
    Raises for a model with other parameterised layers (convolutions are not counted here)."""
    others = [type(m).__name__ for m in model.modules()
              if not isinstance(m, nn.Linear) and any(True for _ in m.parameters(recurse=False))]
    if others:
        raise ValueError(f"the cost model counts linear layers only; this model also has {sorted(set(others))}")
    layers = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if not layers:
        raise ValueError("the model has no linear layer to count")
    return [Linear(m.in_features, m.out_features, first=(i == 0)) for i, m in enumerate(layers)]


def forward_flops(layers: Iterable[Linear], rows: int) -> int:
    """FLOPs of one forward pass over ``rows`` examples."""
    return sum(2 * rows * layer.fan_in * layer.fan_out for layer in layers)


def gradient_flops(layers: Iterable[Linear], rows: int) -> int:
    """FLOPs of one forward and backward pass over ``rows`` examples (one ``grad_fn`` call): forward and
    weight gradient for every layer, input gradient for every layer but the first."""
    total = 0
    for layer in layers:
        product = 2 * rows * layer.fan_in * layer.fan_out
        total += product * (2 if layer.first else 3)
    return total


def plan_flops(layers: list[Linear], batches: Iterable[int], gradients: int) -> int:
    """FLOPs of one client's local plan: ``batches`` are the rows of each of its steps (a partial last
    batch of an epoch counts its own rows), each step ``gradients`` forward-and-backward passes."""
    return gradients * sum(gradient_flops(layers, rows) for rows in batches)


def step_products(layers: list[Linear], rows: int) -> list[tuple[int, int, int]]:
    """The ``(m, k, n)`` shapes (``[m, k] @ [k, n]``) of one forward-and-backward pass over ``rows``
    examples, as autograd runs them: per layer ``x @ W^T``, then ``dy^T @ x`` and (not the first
    layer) ``dy @ W``. ``gradient_flops`` is ``sum(2 m k n)`` over these."""
    shapes = []
    for layer in layers:
        shapes.append((rows, layer.fan_in, layer.fan_out))           # forward
        shapes.append((layer.fan_out, rows, layer.fan_in))           # weight gradient
        if not layer.first:
            shapes.append((rows, layer.fan_out, layer.fan_in))       # input gradient
    return shapes


def forward_products(layers: list[Linear], rows: int) -> list[tuple[int, int, int]]:
    """The ``(m, k, n)`` shapes of one forward pass over ``rows`` examples."""
    return [(rows, layer.fan_in, layer.fan_out) for layer in layers]


def time_products(shapes: list[tuple[int, int, int]], seconds, dtype=torch.float32) -> float:
    """Seconds of one sequence of float32 products of ``shapes`` on this thread, as ``seconds(fn, calls)``
    (a best-of timer) measures them; the operands are made once."""
    operands = [(torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)) for m, k, n in shapes]
    outs = [torch.empty(m, n, dtype=dtype) for m, _, n in shapes]

    def run() -> None:
        for (a, b), out in zip(operands, outs):
            torch.mm(a, b, out=out)

    flops = sum(2 * m * k * n for m, k, n in shapes)
    calls = max(3, min(2000, int(5e8 // max(flops, 1))))     # about 5 ms of work per timed loop at 100 GFLOP/s
    return seconds(run, calls)
