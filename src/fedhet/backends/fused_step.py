"""The sequential backend's fused local step: the model's step of :mod:`fedhet.models.mlp_step` with
the solver's rule of :meth:`fedhet.client.base.LocalSolver.segment_direction`.

Where it applies (fedhet's MLP or logistic regression under cross-entropy with class-index targets,
on the CPU, and a solver whose step is ``w -= eta * direction`` with a segment rule: local SGD,
FedProx, SCAFFOLD, FedDyn, FedADMM and FedCM, with weight decay, without clipping), one local step is one call with no ``grad_fn``
closure, no flat gradient buffer and no whole-vector update, bitwise the step
:meth:`LocalSolver.step` takes with the hand-written gradient (benchmarks/README.md, "The fused local
step"). Everywhere else :func:`fused_step_obstacle` says why and the backend takes that step.
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from fedhet.client.base import LocalSolver, segment_rule_obstacle
from fedhet.core.task import FederatedTask
from fedhet.models.mlp_step import MLPStep, step_obstacle


def fused_step_obstacle(task: FederatedTask, solver: LocalSolver) -> Optional[str]:
    """Why the sequential backend cannot take :class:`FusedLocalStep` for ``task`` and ``solver``, or
    None. Bitwise equality with the hand-written gradient's step is checked on the CPU only."""
    if task.device.type != "cpu":
        return "the task is not on the CPU"
    if task.train.targets.dtype != torch.int64:
        return "the targets are not class indices"
    return step_obstacle(task.model, task.spec, task.loss_fn) or segment_rule_obstacle(solver)


class FusedLocalStep:
    """``step(inputs, targets, learning_rate, local) -> loss``: ``solver``'s local step on the
    bound flat parameters ``w`` (in place), from the round's start ``x``, with the client's
    ``local`` (what ``solver.begin`` returned); returns the minibatch loss as
    :meth:`LocalSolver.step` does."""

    def __init__(self, task: FederatedTask, solver: LocalSolver, w: torch.Tensor, x: torch.Tensor):
        self._model_step = MLPStep(task.model, task.spec, w)
        self._direction = solver.segment_direction
        self._x = x

    def __call__(self, inputs: torch.Tensor, targets: torch.Tensor, learning_rate: float,
                 local: dict[str, Any]) -> torch.Tensor:
        direction, x = self._direction, self._x
        return self._model_step(inputs, targets, learning_rate,
                                lambda grad, w, part: direction(grad, w, x, local, part))


def fused_local_step(task: FederatedTask, solver: LocalSolver, w: torch.Tensor,
                     x: torch.Tensor) -> Optional[FusedLocalStep]:
    """A :class:`FusedLocalStep` on ``w`` from ``x``, or None where :func:`fused_step_obstacle` says why not."""
    return FusedLocalStep(task, solver, w, x) if fused_step_obstacle(task, solver) is None else None
