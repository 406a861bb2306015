"""The vectorised backend: a whole cohort trains at once, as one ``[K, d]`` matrix of parameters.

Each local step is one batched computation for all ``K`` clients: the model runs through
``torch.func.functional_call`` under ``torch.func.vmap`` over the clients' parameter rows (named
views of ``w [K, d]``, :meth:`fedhet.core.params.ParamSpec.views`) and their minibatches ``[K, B, ...]``,
and ``torch.func.grad_and_value`` gives every client's minibatch gradient. The solver's step rule is
written on tensors whose last dimension is ``d`` with broadcasting leading dimensions
(:class:`fedhet.client.base.LocalSolver`), so ``solver.step(w [K, d], x [d], grad_fn, lr, local)``
runs once per step for the whole cohort. This turns ``K`` streams of small kernels into a few large
ones, which is what a GPU needs; on a CPU with one thread it is no faster than the loop (see
:mod:`fedhet.engine.backend_choice`). For fedhet's MLP under cross-entropy the gradients come from
batched matrix products instead (:mod:`fedhet.backends.mlp_cohort_grad`): the same function without
``torch.func``'s per-step cost, which on a GPU was most of a step (:func:`make_cohort_grad`).

Exactness (the same numbers as :class:`~fedhet.backends.sequential.SequentialBackend`, up to the
order of floating-point sums):

- batches come from :func:`fedhet.backends.base.client_batches`, the sequential backend's stream;
- unequal batch sizes (partial last batches in epoch mode, Hybrid+'s per-client ``B``) are padded to
  the round's largest batch ``B_max`` with a weight per example: ``1/b`` for the ``b`` real examples
  of a client's batch, ``0`` for padding, so ``sum_j weight_j loss_j`` is exactly the mean loss over
  the real batch, which is what ``task.loss_fn`` computes in the sequential backend. This needs
  ``task.loss_fn`` to be a mean of per-example losses (cross-entropy and squared losses are); the
  backend checks it once on a small batch and falls back to the sequential backend otherwise;
- clients with fewer steps (Hybrid, Hybrid+) are frozen after their last step: on every step where
  some clients are done, their rows of ``w`` and of the solver's per-client local context are put
  back after the step, their gradient weights are zero, and their loss does not count;
- augmentation draws each client's generator on that client's real batch only, as the sequential
  backend does.

Not vectorised (the backend runs the sequential code instead and says so once): models with dropout
(``vmap`` would draw the masks from a different stream than the per-client seeded global generator
of :func:`fedhet.backends.base.seed_dropout`, so the numbers could not match), models with batch-norm
running statistics (their in-place buffer updates are per client), a solver whose class sets
``vectorizable = False``, and any model ``vmap`` cannot run (detected by a trial on two one-example
clients). :func:`unsupported_reason` names the reason.

Placement: ``w``, the padded index and weight tensors of the round and every gathered minibatch
live on the task's device, next to the training data; indices are built on the CPU (Python lists of
the plans) and moved once per round.
"""
from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Callable, Optional

import torch
from torch import nn

from fedhet.backends.base import RoundWork, augmentation_generator, client_batches, client_plan, cohort_sizes, on_device
from fedhet.backends.mlp_cohort_grad import cohort_mlp_gradient
from fedhet.backends.sequential import SequentialBackend
from fedhet.client.base import LocalSolver
from fedhet.client.context import ClientContext, begin_client
from fedhet.core.cohort import Cohort
from fedhet.core.task import FederatedTask

BatchedGrad = Callable[..., tuple[dict[str, torch.Tensor], torch.Tensor]]
# (w [K, d], inputs [K, B, ...], targets [K, B], weights [K, B], out=None) -> (losses [K], gradients [K, d]);
# out: a [K, d] tensor the gradients are written into (lockstep's ragged steps), else a new one.
CohortGrad = Callable[..., tuple[torch.Tensor, torch.Tensor]]


def model_obstacle(task: FederatedTask) -> Optional[str]:
    """Why ``task``'s model cannot be vectorised exactly, or None."""
    if task.has_dropout:
        return "the model has dropout, whose masks under vmap cannot match the sequential per-client stream"
    for module in task.model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.track_running_stats:
            return "the model has batch-norm running statistics, which are updated in place per client"
    return None


def solver_obstacle(solver: Optional[LocalSolver]) -> Optional[str]:
    """Why ``solver`` cannot run on ``[K, d]`` parameters, or None. A solver opts out by setting the
    class attribute ``vectorizable = False`` (e.g. a step rule that is not written row-wise)."""
    if solver is not None and not getattr(solver, "vectorizable", True):
        return f"the local solver {type(solver).__name__} is not vectorizable"
    return None


def make_batched_grad(task: FederatedTask) -> BatchedGrad:
    """``batched(params, inputs, targets, weights) -> (grads, losses)`` for a cohort.

    ``params``: name -> ``[K, *shape]``; ``inputs`` ``[K, B, ...]``; ``targets`` ``[K, B]``;
    ``weights`` ``[K, B]`` (``1/b`` on a client's ``b`` real examples, 0 on padding). Returns the
    gradient of each client's weighted loss (name -> ``[K, *shape]``) and the losses ``[K]``.
    """
    model, loss_fn = task.model, task.loss_fn

    def example_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        # task.loss_fn is a mean over the batch; on a batch of one it is that example's loss.
        return loss_fn(output.unsqueeze(0), target.unsqueeze(0))

    example_losses = torch.func.vmap(example_loss)

    def client_loss(params: dict[str, torch.Tensor], inputs: torch.Tensor, targets: torch.Tensor,
                    weights: torch.Tensor) -> torch.Tensor:
        outputs = torch.func.functional_call(model, params, (inputs,))
        return (example_losses(outputs, targets) * weights).sum()

    return torch.func.vmap(torch.func.grad_and_value(client_loss))


def make_cohort_grad(task: FederatedTask) -> CohortGrad:
    """The cohort's gradient function: the batched matrix products of
    :mod:`fedhet.backends.mlp_cohort_grad` for fedhet's MLP under cross-entropy, else
    :func:`vmap_cohort_grad`."""
    fast = cohort_mlp_gradient(task)
    return fast if fast is not None else vmap_cohort_grad(task)


def vmap_cohort_grad(task: FederatedTask) -> CohortGrad:
    """:func:`make_batched_grad`'s ``vmap`` with its gradients concatenated into ``[K, d]``."""
    spec, batched = task.spec, make_batched_grad(task)

    def cohort_grad(w: torch.Tensor, inputs: torch.Tensor, targets: torch.Tensor,
                    weights: torch.Tensor, out: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
        grads, losses = batched(spec.views(w), inputs, targets, weights)
        pieces = [grads[name].reshape(w.shape[0], -1) for name in spec.names]
        flat = torch.cat(pieces, dim=1) if out is None else torch.cat(pieces, dim=1, out=out)
        return losses.detach(), flat

    return cohort_grad


def trial_obstacle(task: FederatedTask, batched: BatchedGrad) -> Optional[str]:
    """Run ``batched`` on two one-example clients and compare with ``task.loss_fn``'s own mean over
    two examples: catches models vmap cannot run and losses that are not means of per-example
    losses. Returns the reason, or None."""
    spec = task.spec
    x = spec.flatten(task.model, dtype=task.dtype).to(task.device)
    inputs, targets = task.train.inputs[:2], task.train.targets[:2]
    try:
        with torch.no_grad():
            expected = task.loss_fn(torch.func.functional_call(task.model, spec.views(x), (inputs,)), targets)
        rows = x.unsqueeze(0).expand(1, -1)
        weights = torch.full((1, 2), 0.5, dtype=task.dtype, device=task.device)
        _, losses = batched(spec.views(rows), inputs.unsqueeze(0), targets.unsqueeze(0), weights)
    except Exception as error:  # noqa: BLE001  (any failure means: not vectorisable; say which)
        first_line = (str(error).splitlines() or [type(error).__name__])[0]
        return f"vmap cannot run this model ({type(error).__name__}: {first_line[:160]})"
    tolerance = 1e-4 if task.dtype != torch.float64 else 1e-10
    if not torch.allclose(losses[0].to(torch.float64), expected.to(torch.float64), rtol=tolerance, atol=tolerance):
        return "task.loss_fn is not a mean of per-example losses, so padded batches cannot be weighted exactly"
    return None


def unsupported_reason(task: FederatedTask, solver: Optional[LocalSolver] = None) -> Optional[str]:
    """Why the vectorised backend would not give the sequential backend's numbers, or None."""
    reason = model_obstacle(task) or solver_obstacle(solver)
    if reason is None:
        reason = trial_obstacle(task, make_batched_grad(task))
    return reason


class VectorizedBackend:
    """Trains the cohort as ``w [K, d]`` with vmapped per-client gradients; see the module docstring."""

    name = "vectorized"

    def __init__(self) -> None:
        # One run uses one task and one solver; remember the last pair checked and its function.
        self._checked: Optional[tuple[FederatedTask, LocalSolver, Optional[str]]] = None
        self._batched: Optional[tuple[FederatedTask, CohortGrad]] = None
        self._fallback = SequentialBackend()

    def obstacle(self, task: FederatedTask, solver: LocalSolver) -> Optional[str]:
        """Why this pair runs on the sequential code (warned once per pair), or None."""
        if self._checked is None or self._checked[0] is not task or self._checked[1] is not solver:
            reason = unsupported_reason(task, solver)
            self._checked = (task, solver, reason)
            if reason is not None:
                warnings.warn(f"vectorized backend: {reason}; running the sequential backend instead",
                              RuntimeWarning, stacklevel=3)
        return self._checked[2]

    def close(self) -> None:
        """Nothing to release: the cohort trains in this process."""

    def train_cohort(self, task: FederatedTask, solver: LocalSolver,
                     work: RoundWork) -> tuple[Cohort, dict[str, torch.Tensor]]:
        if self.obstacle(task, solver) is not None:
            return self._fallback.train_cohort(task, solver, work)
        if self._batched is None or self._batched[0] is not task:
            self._batched = (task, make_cohort_grad(task))
        task.model.train()
        return train_cohort_vectorized(task, solver, work, self._batched[1])


def padded_round_batches(task: FederatedTask, solver: LocalSolver, work: RoundWork):
    """The round's minibatches of every client, padded: ``(index [S, K, B], weight [S, K, B],
    batches, num_steps [K])`` with ``S`` the largest step count and ``B`` the largest batch.

    ``index[s, k]`` holds client ``k``'s global example indices of step ``s`` (padded with its first
    example), ``weight[s, k]`` is ``1/b`` on its ``b`` real examples and 0 elsewhere (all zero once
    client ``k`` has finished). ``batches[k]`` keeps the unpadded index tensors (for augmentation).
    """
    client_ids = work.client_ids.tolist()
    plans = [client_plan(task, solver.options, work, client_id) for client_id in client_ids]
    cpu = torch.device("cpu")
    batches = [client_batches(task, plan, work, client_id, device=cpu)
               for plan, client_id in zip(plans, client_ids)]
    num_steps = [plan.num_steps for plan in plans]
    max_steps = max(num_steps, default=0)
    max_batch = max((len(idx) for client in batches for idx in client), default=1)
    num_clients = len(client_ids)
    index = torch.empty(max_steps, num_clients, max_batch, dtype=torch.int64)
    weight = torch.zeros(max_steps, num_clients, max_batch, dtype=task.dtype)
    for k, client_id in enumerate(client_ids):
        index[:, k, :] = task.client_range(client_id)[0]
        for s, idx in enumerate(batches[k]):
            index[s, k, :len(idx)] = idx
            weight[s, k, :len(idx)] = 1.0 / len(idx)
    return index.to(task.device), weight.to(task.device), batches, torch.tensor(num_steps, dtype=torch.int64)


def train_cohort_vectorized(task: FederatedTask, solver: LocalSolver, work: RoundWork,
                            cohort_grad: CohortGrad) -> tuple[Cohort, dict[str, torch.Tensor]]:
    device = task.device
    x = work.params
    num_clients = int(work.client_ids.numel())
    index, weight, batches, num_steps = padded_round_batches(task, solver, work)
    client_states = on_device(work.client_states, device)
    transform = task.train_transform
    generators = [augmentation_generator(task, work, int(c)) for c in work.client_ids.tolist()]

    def augment(inputs: torch.Tensor, s: int, active_list: list[bool]) -> None:
        for k, is_active in enumerate(active_list):
            generator = generators[k]       # not None: the task has a transform
            if transform is not None and is_active and generator is not None:
                size = len(batches[k][s])
                inputs[k, :size] = transform(inputs[k, :size], generator)

    w = x.unsqueeze(0).repeat(num_clients, 1)                     # [K, d], every client starts at x
    context = ClientContext(work.round_index, tuple(work.client_ids.tolist()), work.seed, cohort=True, device=device)
    local = begin_client(solver, x, client_states, work.broadcast, work.learning_rate, context)
    steps = CohortSteps(index, weight, num_steps, task.train.inputs, task.train.targets,
                        augment if transform is not None else None)
    loss_sum = run_cohort_steps(solver, w, x, work.learning_rate, local, steps, cohort_grad)
    steps_on_device = num_steps.to(device)
    delta, new_states, extras = solver.finish(x, w, local, client_states, steps_on_device, work.learning_rate)
    losses = (loss_sum.cpu() / num_steps.clamp(min=1).to(torch.float64))
    cohort = Cohort(client_ids=work.client_ids, deltas=delta.to(task.dtype).contiguous(),
                    num_examples=cohort_sizes(task, work.client_ids), local_steps=num_steps,
                    train_loss=losses, extras=dict(extras))
    return cohort, dict(new_states)


@dataclasses.dataclass
class CohortSteps:
    """A round's padded minibatches of ``K`` rows (:func:`padded_round_batches`): ``index [S, K, B]``
    into ``inputs``/``targets``, ``weight [S, K, B]``, ``num_steps [K]`` (CPU int64), and
    ``augment(inputs [K, B, ...], s, active)``, which transforms the active rows' real examples of
    step ``s`` in place (None: no augmentation)."""

    index: torch.Tensor
    weight: torch.Tensor
    num_steps: torch.Tensor
    inputs: torch.Tensor
    targets: torch.Tensor
    augment: Optional[Callable[[torch.Tensor, int, list[bool]], None]] = None


def run_cohort_steps(solver: LocalSolver, w: torch.Tensor, x: torch.Tensor, learning_rate: float | torch.Tensor,
                     local: dict[str, Any], steps: CohortSteps, cohort_grad: CohortGrad) -> torch.Tensor:
    """The local steps of ``K`` rows of ``w [K, d]``, in place; returns each row's loss sum ``[K]``
    (float64) over its own steps. A row with fewer steps is frozen after its last one (module
    docstring). ``x`` is ``[d]`` or one start point per row ``[K, d]``; ``learning_rate`` one number
    or a ``[K, 1]`` column (:meth:`fedhet.client.base.LocalSolver.step`)."""
    index, weight, num_steps = steps.index, steps.weight, steps.num_steps
    num_clients = w.shape[0]
    device = w.device
    steps_on_device = num_steps.to(device)
    # Clients in the order they finish: at step s the finished ones are its first (count of
    # num_steps <= s) entries, a count known on the host, so freezing them needs no GPU sync (a
    # nonzero on a device mask would sync every step of a Hybrid round).
    finish_order = torch.argsort(num_steps, stable=True).to(device)
    inputs_all, targets_all = steps.inputs, steps.targets
    loss_sum = torch.zeros(num_clients, dtype=torch.float64, device=device)

    for s in range(index.shape[0]):
        step_index, step_weight = index[s], weight[s]
        # index_select on the flat index (the same rows as inputs_all[step_index], 4-5x cheaper).
        flat_index = step_index.reshape(-1)
        inputs = inputs_all.index_select(0, flat_index).view(*step_index.shape, *inputs_all.shape[1:])  # [K, B, ...]
        targets = targets_all.index_select(0, flat_index).view(*step_index.shape, *targets_all.shape[1:])
        active = steps_on_device > s                              # [K]
        active_list = (num_steps > s).tolist()
        if steps.augment is not None:
            steps.augment(inputs, s, active_list)

        def grad_fn(point: torch.Tensor, inputs=inputs, targets=targets, step_weight=step_weight):
            return cohort_grad(point, inputs, targets, step_weight)

        if all(active_list):
            loss = solver.step(w, x, grad_fn, learning_rate, local)
        else:
            # Freeze finished clients: put back their rows of w and of the solver's local context.
            frozen = finish_order[:active_list.count(False)]
            saved_w = w[frozen]
            saved_local = snapshot_rows(local, frozen, num_clients)
            loss = solver.step(w, x, grad_fn, learning_rate, local)
            w[frozen] = saved_w
            restore_rows(local, frozen, saved_local)
        loss_sum += torch.where(active, loss.to(torch.float64), 0.0)
    return loss_sum


def snapshot_rows(local: dict[str, Any], rows: torch.Tensor, num_clients: int) -> dict[str, tuple]:
    """``rows`` of every entry of a solver's local context that holds one row per client (leading
    dim ``K``), with the entry's identity and version so that an untouched entry costs nothing."""
    return {key: (value, value._version, value[rows].clone()) for key, value in local.items()
            if isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == num_clients}


def restore_rows(local: dict[str, Any], rows: torch.Tensor, saved: dict[str, tuple]) -> None:
    """Undo a step's change to ``rows`` of the local context, whether the step rebound an entry to a
    new tensor or changed it in place. The restored entry is a new tensor: a context entry may
    alias the client states or the broadcast, which must not be written."""
    for key, (before, version, values) in saved.items():
        after = local[key]              # a step rebinds or changes an entry, never removes one
        if after is before and after._version == version:
            continue
        restored = after.clone()
        restored[rows] = values
        local[key] = restored
