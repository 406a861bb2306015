"""The reference backend: clients one after another, in place on one flat parameter buffer.

The model's parameters are bound as views of one flat vector ``w`` and their gradients as views of
one flat buffer ``g`` (:func:`fedhet.core.params.bind_flat`), so each local step is: gather a batch,
forward, backward straight into ``g``, and one fused update of ``w``. Starting a client is one copy
``w <- x``. This is as close to a hand-written PyTorch loop as a framework can be.

For fedhet's MLP under cross-entropy the gradient does not go through autograd at all:
:class:`fedhet.backends.mlp_grad.MLPGradient` calls the kernels autograd would call (bitwise the
same loss and gradient) and writes the gradient straight into ``g``, which then needs no zeroing.
For local SGD and the solvers that add elementwise terms to its gradient (FedProx, SCAFFOLD, FedDyn,
FedADMM, FedCM) on that MLP (or logistic regression) the whole step is fused
(:mod:`fedhet.backends.fused_step`): the same kernels update ``w`` layer by layer, with no ``g``,
no ``grad_fn`` and bitwise the same numbers (benchmarks/README.md, "The fused local step").

The gradient contract (:data:`fedhet.client.base.GradFn`): for a solver that may keep its gradient
(``solver.keeps_gradient``, True for any solver class that does not declare it) ``grad_fn`` hands
out a copy of ``g``, a tensor the solver owns, as the vectorised backend's gradient always is;
handing out ``g`` itself would give a solver that keeps it (a local-momentum solver's first step)
the next step's gradient in its place, silently, on this backend (and the processes, Ray and
Flower backends, which run this code) only. A solver that declares ``keeps_gradient = False`` (every
solver of the package) gets ``g`` itself and saves the copy, about 2.5% of a local step of the MLP
(benchmarks/bench_gradient_copy.py).
"""
from __future__ import annotations

from typing import Optional

import torch

from fedhet.backends.base import (
    RoundWork,
    augmentation_generator,
    client_batches,
    client_plan,
    cohort_sizes,
    on_device,
    seed_dropout,
    slice_states,
    stack_states,
)
from fedhet.backends.fused_step import fused_local_step
from fedhet.backends.mlp_grad import mlp_gradient
from fedhet.client.base import LocalSolver
from fedhet.client.context import ClientContext, begin_client
from fedhet.core.cohort import Cohort
from fedhet.core.params import bind_flat
from fedhet.core.task import FederatedTask


class SequentialBackend:
    """``hand_written_mlp=False`` runs every model through autograd (the same numbers, slower: for
    tests and benchmarks of :mod:`fedhet.backends.mlp_grad`). ``copy_gradient``: None (the default)
    copies the gradient for a solver that declares ``keeps_gradient`` (the contract); True copies it
    for every solver (what the contract test compares a ``keeps_gradient = False`` declaration
    with); False never copies, breaking the contract for a solver that keeps its gradient (only for
    benchmarks/bench_gradient_copy.py, which measures what the copy costs). ``fused_step=False``
    takes the step through ``grad_fn`` and :meth:`LocalSolver.step` where the fused step would
    apply (bitwise the same numbers: for tests and benchmarks/bench_fused_step.py)."""

    name = "sequential"

    def __init__(self, hand_written_mlp: bool = True, copy_gradient: Optional[bool] = None,
                 fused_step: bool = True):
        self.hand_written_mlp = hand_written_mlp
        self.copy_gradient = copy_gradient
        # The fused step hands out no gradient: it is left out where the gradient handed out is
        # what is tested or measured (copy_gradient set), and with the autograd path.
        self.fused_step = fused_step and hand_written_mlp and copy_gradient is None

    def close(self) -> None:
        """Nothing to release: the cohort trains in this process."""

    def train_cohort(self, task: FederatedTask, solver: LocalSolver,
                     work: RoundWork) -> tuple[Cohort, dict[str, torch.Tensor]]:
        model, spec = task.model, task.spec
        x = work.params
        num_clients = int(work.client_ids.numel())
        w = torch.empty(spec.dim, dtype=task.dtype, device=task.device)
        g = torch.zeros_like(w)
        bind_flat(model, spec, w, g)
        model.train()
        # The MLP's gradient without autograd, bitwise autograd's (fedhet.backends.mlp_grad); None
        # for every other model or loss.
        fused = mlp_gradient(task, w, g) if self.hand_written_mlp else None
        # What grad_fn hands out: a copy of g when the solver may keep it (the module docstring).
        copy = solver.keeps_gradient if self.copy_gradient is None else self.copy_gradient
        handed = torch.clone if copy else (lambda buffer: buffer)
        # The whole step fused (fedhet.backends.fused_step) where model, loss and solver allow it.
        fused_step = (fused_local_step(task, solver, w, x)
                      if self.fused_step and isinstance(work.learning_rate, float) else None)

        deltas = torch.empty(num_clients, spec.dim, dtype=task.dtype, device=task.device)
        steps = torch.empty(num_clients, dtype=torch.int64)
        # Loss sums stay on the task's device until the end of the round: reading one per client
        # would wait for the GPU after every client.
        loss_sums = torch.zeros(num_clients, dtype=torch.float64, device=task.device)
        new_states, extras_rows = [], []
        inputs_all, targets_all = task.train.inputs, task.train.targets
        client_states = on_device(work.client_states, task.device)
        transform, loss_fn = task.train_transform, task.loss_fn

        for k, client_id in enumerate(work.client_ids.tolist()):
            plan = client_plan(task, solver.options, work, client_id)
            batches = client_batches(task, plan, work, client_id)
            aug_generator = augmentation_generator(task, work, client_id)
            seed_dropout(task, work, client_id)
            client_state = slice_states(client_states, k)
            w.copy_(x)
            context = ClientContext(work.round_index, (client_id,), work.seed, cohort=False, device=task.device)
            local = begin_client(solver, x, client_state, work.broadcast, work.learning_rate, context)
            loss_sum = loss_sums[k]         # a view: += accumulates into loss_sums
            for idx in batches:
                # index_select, not inputs_all[idx]: the same rows, copied faster than by advanced
                # indexing (benchmarks/README.md, "Results", lists it among the measured changes).
                inputs = inputs_all.index_select(0, idx)
                # Both or neither: augmentation_generator is None exactly when the task has no transform.
                if transform is not None and aug_generator is not None:
                    inputs = transform(inputs, aug_generator)
                targets = targets_all.index_select(0, idx)
                if fused_step is not None:
                    loss_sum += fused_step(inputs, targets, work.learning_rate, local)
                    continue

                def grad_fn(point: torch.Tensor, inputs=inputs, targets=targets):
                    if fused is not None:
                        return fused(point, inputs, targets), handed(g)
                    saved = None
                    if point is not w:
                        saved = w.clone()
                        w.copy_(point)
                    g.zero_()
                    loss = loss_fn(model(inputs), targets)
                    loss.backward()
                    if saved is not None:
                        w.copy_(saved)
                    return loss.detach(), handed(g)

                loss_sum += solver.step(w, x, grad_fn, work.learning_rate, local)
            delta, new_state, extras = solver.finish(x, w, local, client_state, plan.num_steps, work.learning_rate)
            deltas[k] = delta
            steps[k] = plan.num_steps
            new_states.append(new_state)
            extras_rows.append(extras)

        # Drop the views into g so that nothing outside this call accumulates into our buffer.
        for param in model.parameters():
            param.grad = None
        cohort = Cohort(client_ids=work.client_ids, deltas=deltas, num_examples=cohort_sizes(task, work.client_ids),
                        local_steps=steps, train_loss=loss_sums.cpu() / steps.clamp(min=1).to(torch.float64),
                        extras=stack_states(extras_rows))
        return cohort, stack_states(new_states)
