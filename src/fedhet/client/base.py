"""The local-solver stage: what a client does between receiving ``x`` and uploading.

A solver is an immutable object (its options). Its state is explicit:

- per-client memories (``client_state_names``), kept by the engine in ``[N, d]`` stores and handed
  to the solver as ``{name: [K, d] or [d]}`` for the clients that train;
- server-side state the clients need (SCAFFOLD's ``c``): the solver names it as a
  :class:`~fedhet.server.base.ServerStage` (:meth:`LocalSolver.server_stage`), which the server
  method owns and updates; clients receive its ``broadcast`` (docs/design.md, "Server-side state").

The per-step rule is written on tensors whose last dimension is the parameter dimension ``d`` and
whose leading dimensions (none, or ``K`` clients) broadcast, so the same solver code runs in the
sequential backend (``w`` of shape ``[d]``) and the vectorised one (``[K, d]``). ``w`` is updated in
place. ``grad_fn(w)`` returns ``(loss, grad)`` of the minibatch loss at ``w`` on the current batch
(a solver may call it twice, e.g. FedSAM/FedSpeed's perturbed gradient). Whether the solver may keep
``grad`` is the gradient contract of :data:`GradFn` and :attr:`LocalSolver.keeps_gradient`.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import torch

from fedhet.client.context import ClientContext
from fedhet.core.cohort import EFFECTIVE_STEPS, Cohort
from fedhet.core.component_output import check_tensor_output
from fedhet.core.options import ConfigError, option, refuse_inactive

GradFn = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
"""``grad_fn(point) -> (loss, grad)``: the minibatch loss at ``point`` (``[d]`` or ``[K, d]``) and its
gradient, on the step's batch; ``point`` may differ from ``w`` (a perturbed point).

The gradient contract: whether ``grad`` may be kept depends on the solver's
:attr:`LocalSolver.keeps_gradient`, and every backend honours it.

- ``keeps_gradient = True`` (the default of every solver class that does not declare it): ``grad``
  is a tensor the solver owns. It may keep it past the call (in ``local``, in an attribute, as a
  momentum buffer's first value), change it in place, and call ``grad_fn`` again without it
  changing. The sequential backend (and the processes, Ray and Flower backends, which run its code)
  pays one copy of ``d`` numbers per call for this (about 2.5% of an MLP step,
  benchmarks/bench_gradient_copy.py).
- ``keeps_gradient = False``: ``grad`` may be a buffer the backend reuses. It is valid until the
  solver's next call of ``grad_fn`` or the end of :meth:`LocalSolver.step`, whichever comes first;
  a solver that needs it longer copies it (FedSpeed scales its first gradient into a new tensor
  before the second call). The sequential backend then hands out its gradient buffer itself.

The vectorised backend's ``grad`` is always a new tensor. Keeping a reused buffer is not detected
at run time: the step would silently read a later gradient in its place, on some backends only.
``tests/backends/test_backends_gradient_contract.py`` runs every registered solver on every backend
and checks each ``keeps_gradient = False`` declaration (the numbers must not change when the
gradient is copied).
"""


@dataclasses.dataclass(frozen=True)
class ClientOptions:
    """Options shared by every local solver (``[client]`` section)."""

    learning_rate: float = option(0.01, gt=0, symbol="eta_l", help="local learning rate")
    batch_size: int = option(64, ge=1, symbol="B", help="minibatch size (capped at the client's data size)")
    epochs: int = option(1, ge=0, symbol="E", help="local epochs; used when client.steps is 0")
    steps: int = option(0, ge=0, symbol="K", help="fixed number of local steps per round; 0 = use client.epochs")
    weight_decay: float = option(0.0, ge=0, help="L2 weight decay added to the gradient (coupled, as torch.optim.SGD)")
    clip_norm: float = option(0.0, ge=0, help="clip each minibatch gradient to this L2 norm; 0 = no clipping")
    lr_decay: float = option(1.0, gt=0, le=1, symbol="gamma",
                             help="per-round learning-rate decay: eta_l(t) = eta_l * gamma^t")
    lr_step_start: int = option(0, ge=0, help="first round (1-based) whose learning rate is multiplied by "
                                              "client.lr_step_factor, again every client.lr_step_every rounds "
                                              "after it; 0 = no step schedule")
    lr_step_every: int = option(1000, ge=1, help="rounds between steps of the step schedule")
    lr_step_factor: float = option(0.5, gt=0, le=1, help="factor applied at each step of the step schedule")
    system: str = option("fixed", choices=("fixed", "hybrid_plus"),
                         help="system heterogeneity: fixed epochs/steps, or Hybrid+ (E~U{2..5}, B~U{10..|D_i|} per client and round)")

    def validate(self, section: str) -> None:
        if self.steps == 0 and self.epochs == 0 and self.system == "fixed":
            raise ConfigError(f"{section}.epochs", self.epochs, "client.epochs or client.steps must be positive")
        # The step schedule's period and factor without its start would be recorded and change nothing.
        refuse_inactive(self, section, ("lr_step_every", "lr_step_factor"), active=self.lr_step_start > 0,
                        condition=f"{section}.lr_step_start > 0 (the step schedule)")


def local_learning_rate(options: ClientOptions, round_index: int) -> float:
    """``eta_l`` of 0-based round ``round_index`` (round ``t = round_index + 1``)::

        eta_l(t) = eta_l * gamma^(t - 1) * factor^steps(t),
        steps(t) = 0 if start == 0 or t < start, else 1 + (t - start) // every

    e.g. FedAU's CIFAR-100 runs (Appendix C.4: "decay the local learning rate by half every 1,000
    rounds, starting from the 10,000-th round"): start 10000, every 1000, factor 0.5.
    """
    rate = options.learning_rate * options.lr_decay ** round_index
    round_number = round_index + 1
    if options.lr_step_start > 0 and round_number >= options.lr_step_start:
        rate *= options.lr_step_factor ** (1 + (round_number - options.lr_step_start) // options.lr_step_every)
    return rate


def per_client(value: torch.Tensor | int | float, like: torch.Tensor) -> torch.Tensor:
    """``value`` (one number, or one per client ``[K]``, e.g. ``num_steps``) as a tensor in
    ``like``'s dtype and device that broadcasts against ``like`` (``[d]`` or ``[K, d]``): per-client
    numbers get a trailing unit dimension."""
    tensor = torch.as_tensor(value, dtype=like.dtype, device=like.device)
    return tensor.unsqueeze(-1) if tensor.dim() >= 1 else tensor


def clip_by_norm(grad: torch.Tensor, max_norm: float) -> torch.Tensor:
    """Scale ``grad`` (per row of the last dim) to norm at most ``max_norm``, as
    ``torch.nn.utils.clip_grad_norm_`` does (coefficient ``max_norm / (norm + 1e-6)`` clamped at 1)."""
    norm = torch.linalg.vector_norm(grad, dim=-1, keepdim=True)
    coef = (max_norm / (norm + 1e-6)).clamp(max=1.0)
    return grad * coef


class LocalSolver:
    """Base local solver: plain local SGD (FedAvg's client, McMahan et al. 2017).

    Step: ``w <- w - eta_l (clip(grad f_i(w; b)) + wd * w)``; upload ``delta = w_K - x``.
    Subclasses override :meth:`direction` (and the state hooks) to add their correction terms.
    """

    client_state_names: tuple[str, ...] = ()
    # d-vectors a client uploads per round (the virtual clock's upload bytes, docs/system.md): FedAvg's
    # delta. A solver whose clients send more says so next to its rule (SCAFFOLD: delta and Delta c_i).
    # What clients download is counted from the server's broadcast (x plus its published state).
    uploaded_vectors: int = 1
    # The step rule is written row-wise on [..., d] tensors, so the vectorised backend can run it on a
    # [K, d] cohort; a solver whose rule is not sets this to False and that backend falls back.
    vectorizable: bool = True
    #: The gradient contract (:data:`GradFn`): True when the solver may keep the gradient ``grad_fn``
    #: returns past its next call (every backend then hands it a tensor of its own); False when it
    #: uses the gradient only until its next ``grad_fn`` call or the end of the step, which lets the
    #: sequential backend hand out its reused buffer. Not inherited: a subclass that does not
    #: declare it gets True (:meth:`__init_subclass__`), so a solver built on a package solver
    #: (adding a momentum that keeps the gradient, say) is safe without knowing this flag.
    keeps_gradient: bool = False        # plain local SGD reads its gradient once, in the step
    #: Attributes of the solver (hyperparameters read by the step rule) that lockstep runs may hold
    #: as a ``[K, 1]`` column, one value per row, because the rule only multiplies or adds them
    #: (docs/design.md, "Lockstep runs"). Runs whose solvers differ in any other option train in
    #: separate batches.
    lockstep_knobs: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # A declaration covers the class that makes it: the parent's step rule is not the subclass's.
        if "keeps_gradient" not in cls.__dict__:
            cls.keeps_gradient = True

    def __init__(self, options: ClientOptions):
        self.options = options

    # --- server-side state the clients need ----------------------------------------------------
    def server_stage(self) -> Optional[Any]:
        """The server stage (an object with the :class:`fedhet.server.base.ServerStage` methods,
        defined next to the solver) whose broadcast this solver's clients read, e.g. SCAFFOLD's
        ``c``; None when it needs none. The server method owns and runs it."""
        return None

    # --- client side --------------------------------------------------------------------------
    def begin(self, x: torch.Tensor, client_state: dict[str, torch.Tensor],
              broadcast: dict[str, torch.Tensor], learning_rate: float,
              context: Optional[ClientContext] = None) -> dict[str, Any]:
        """Per-client local context for this round (e.g. a correction vector). Default: nothing.

        ``context`` (:class:`fedhet.client.context.ClientContext`; every backend passes it) names the
        round, the training client(s) and their seeded generators: a solver that draws random numbers
        draws them from ``context.randn``/``context.rand`` (or ``context.generators``), never from
        torch's global generator, so its numbers are the same on every backend and after a resume.
        Keep the context in the returned dict to draw in :meth:`direction` too."""
        return {}

    def regularize(self, grad: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """``clip(grad) + wd * w``: the options every solver applies to its minibatch gradient."""
        if self.options.clip_norm > 0:
            grad = clip_by_norm(grad, self.options.clip_norm)
        if self.options.weight_decay > 0:
            grad = grad + self.options.weight_decay * w
        return grad

    def gradient(self, w: torch.Tensor, grad_fn: GradFn) -> tuple[torch.Tensor, torch.Tensor]:
        """Minibatch loss and the regularised gradient ``clip(grad) + wd * w``."""
        loss, grad = grad_fn(w)
        return loss, self.regularize(grad, w)

    def direction(self, w: torch.Tensor, x: torch.Tensor, grad_fn: GradFn,
                  local: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """The local update direction at ``w`` (the step is ``w -= eta_l * direction``). The gradient
        ``grad_fn`` returns may be kept only when the class declares ``keeps_gradient = True`` (or
        does not declare it): the gradient contract of :data:`GradFn`."""
        return self.gradient(w, grad_fn)

    def step(self, w: torch.Tensor, x: torch.Tensor, grad_fn: GradFn, learning_rate: float | torch.Tensor,
             local: dict[str, Any]) -> torch.Tensor:
        """One local step, in place on ``w``; returns the minibatch loss. ``learning_rate`` is one
        number, or a ``[K, 1]`` column of per-row rates when the rows of ``w [K, d]`` belong to runs
        of different rates (lockstep runs, docs/design.md "Lockstep runs")."""
        loss, direction = self.direction(w, x, grad_fn, local)
        if not (isinstance(direction, torch.Tensor) and direction.shape == w.shape):
            check_tensor_output(self, "direction", direction, w.shape)
        if isinstance(learning_rate, torch.Tensor):
            w.addcmul_(direction, learning_rate, value=-1)
        else:
            w.add_(direction, alpha=-learning_rate)
        return loss

    def segment_direction(self, grad: torch.Tensor, w: torch.Tensor, x: torch.Tensor, local: dict[str, Any],
                          part: slice) -> torch.Tensor:
        """:meth:`direction` on one contiguous segment ``part`` of the flat vector, for a step that
        updates the parameters segment by segment (the sequential backend's fused step of the MLP,
        benchmarks/README.md "The fused local step"). ``grad`` and ``w`` are the segment's gradient
        and parameters (``[n]``, ``w`` a view of the flat vector), ``x`` and ``local`` the whole
        round's as :meth:`direction` gets them (slice a ``[d]`` tensor with ``x[part]``); ``grad``
        may be returned as is. It must compute each entry with the same operations as
        :meth:`direction`, which it then equals bitwise. Here: ``grad + wd * w`` (the clipping of
        :meth:`regularize` needs the whole gradient's norm; :func:`segment_rule_obstacle`)."""
        if self.options.weight_decay > 0:
            grad = grad + self.options.weight_decay * w
        return grad

    def finish(self, x: torch.Tensor, w: torch.Tensor, local: dict[str, Any],
               client_state: dict[str, torch.Tensor], num_steps: torch.Tensor | int,
               learning_rate: float | torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """``(delta, new_client_state, extras)`` after the local steps. Default: ``delta = w - x``."""
        return w - x, client_state, {}

    def effective_steps(self, num_steps: torch.Tensor, learning_rate: float) -> torch.Tensor:
        """FedNova's ``a_i`` (Wang et al. 2020): the solver's normalised step count. Plain SGD: ``K_i``."""
        return num_steps.to(torch.float64)


def _owner(cls: type, name: str) -> Optional[type]:
    """The class of ``cls``'s method resolution order that defines attribute ``name``."""
    return next((klass for klass in cls.__mro__ if name in klass.__dict__), None)


def segment_rule_obstacle(solver: LocalSolver) -> Optional[str]:
    """Why ``solver``'s step cannot run segment by segment with :meth:`LocalSolver.segment_direction`
    (benchmarks/README.md, "The fused local step"), or None: the step must be the base class's
    ``w -= eta * direction`` with the base gradient, without clipping, and the class that defines
    :meth:`~LocalSolver.direction` must define :meth:`~LocalSolver.segment_direction` too (a
    subclass that changes the direction and not the segment rule takes the whole-vector step, and so
    does an instance with one of these methods replaced on it)."""
    cls = type(solver)
    if solver.options.clip_norm > 0:
        return "client.clip_norm scales by the whole gradient's norm"
    for name in ("step", "gradient", "regularize", "direction", "segment_direction"):
        # A method set on the instance hides the class's, which the checks below read.
        if name in vars(solver):
            return f"the solver instance has its own {name}"
    for name in ("step", "gradient", "regularize"):
        if _owner(cls, name) is not LocalSolver:
            return f"the solver overrides {name}"
    if _owner(cls, "segment_direction") is not _owner(cls, "direction"):
        return "the solver's direction has no segment rule"
    return None


def with_effective_steps(cohort: Cohort, solver: LocalSolver, learning_rate: float) -> Cohort:
    """``cohort`` with each client's FedNova ``a_i`` as the extra :data:`EFFECTIVE_STEPS` ([K] float64,
    on the deltas' device): ``solver.effective_steps(K_i, eta_l)`` over the whole cohort at once.
    The engine adds it to every non-empty cohort, so a server that normalises by ``a_i`` (FedNova)
    needs nothing from the solver itself."""
    local_steps = cohort.local_steps.to(cohort.deltas.device)
    effective = solver.effective_steps(local_steps, learning_rate)
    cohort.extras[EFFECTIVE_STEPS] = effective.to(device=cohort.deltas.device, dtype=torch.float64)
    return cohort
