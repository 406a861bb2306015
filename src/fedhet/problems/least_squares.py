"""Federated linear least squares with strongly heterogeneous clients and a closed-form optimum.

Client ``i`` holds a design ``A_i`` (``n_i x p``) and targets ``b_i`` and its loss is the mean
squared error of a linear model ``w`` (``p = dim``, plus one when the model has a bias)::

    f_i(w) = (1 / n_i) sum_j 0.5 (a_ij^T w - b_ij)^2,      grad f_i(w) = A_i^T (A_i w - b_i) / n_i

Heterogeneity comes in two kinds, both needed to make local-update methods drift:

- different local optima: ``b_i = A_i theta_i + noise`` with ``theta_i = theta + optimum_spread * z_i``;
- different curvatures: every client scales its features by its own ``exp(scale_spread * z)``, so the
  Hessians ``A_i^T A_i / n_i`` differ. (With equal Hessians, FedAvg's full-batch local GD averages to
  an unbiased step and does not drift.)

Two global optima are computed by a direct float64 solve (``torch.linalg.lstsq``):

- :attr:`LeastSquaresProblem.optimum` minimises the data-size-weighted loss
  ``sum_i (n_i / n) f_i`` (FedAvg's objective, whose weights are section 2's ``p_i``; docs/algorithms.md section 2);
- :attr:`LeastSquaresProblem.uniform_optimum` minimises ``(1/N) sum_i f_i``, the fixed point of the
  methods whose server averages clients without data-size weights (SCAFFOLD, FedDyn, FedADMM,
  FedSpeed). With equal client sizes (the default) the two coincide.

Use full-batch local steps (``batch_size >= n_i``) and float64 for deterministic dynamics.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import torch
from torch import nn

from fedhet.core.dataset import TensorDataset
from fedhet.core.seeding import torch_generator
from fedhet.core.store import StoreOptions
from fedhet.core.task import FederatedTask, build_task
from fedhet.engine.simulator import Simulator


def squared_loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean over the batch of ``0.5 (prediction - target)^2``; ``outputs`` is ``[B, 1]`` or ``[B]``."""
    if outputs.dim() == targets.dim() + 1:
        outputs = outputs.squeeze(-1)
    return 0.5 * (outputs - targets).pow(2).mean()


@dataclasses.dataclass
class LeastSquaresProblem:
    """A federated least-squares task and its exact solutions (all float64 on the task's device).

    Parameter vectors are in the model's flat order: the weights, then the bias when present
    (the designs carry a trailing column of ones for it).
    """

    task: FederatedTask
    designs: list[torch.Tensor]        # A_i, [n_i, p]
    targets: list[torch.Tensor]        # b_i, [n_i]
    initial_params: torch.Tensor       # x^0, [p]
    optimum: torch.Tensor              # argmin sum_i (n_i/n) f_i, [p]
    uniform_optimum: torch.Tensor      # argmin (1/N) sum_i f_i, [p]
    client_optima: torch.Tensor        # argmin f_i for each client, [N, p]

    @property
    def num_clients(self) -> int:
        return len(self.designs)

    def client_loss(self, client_id: int, params: torch.Tensor) -> torch.Tensor:
        design, target = self.designs[client_id], self.targets[client_id]
        return 0.5 * (design @ params.to(design.dtype) - target).pow(2).mean()

    def client_gradient(self, client_id: int, params: torch.Tensor) -> torch.Tensor:
        """``grad f_i(w) = A_i^T (A_i w - b_i) / n_i`` (analytic, independent of autograd)."""
        design, target = self.designs[client_id], self.targets[client_id]
        return design.T @ (design @ params.to(design.dtype) - target) / len(target)

    def global_loss(self, params: torch.Tensor) -> float:
        """``sum_i (n_i / n) f_i(w)``."""
        sizes = [len(t) for t in self.targets]
        total = sum(n * float(self.client_loss(i, params)) for i, n in enumerate(sizes))
        return total / sum(sizes)

    def distance(self, params: torch.Tensor, *, uniform: bool = False) -> float:
        """``||w - w*||`` to :attr:`optimum` (or to :attr:`uniform_optimum`)."""
        target = self.uniform_optimum if uniform else self.optimum
        return float(torch.linalg.vector_norm(params.to(target.dtype) - target))

    def simulator(self, *, solver: Any, server: Any, participation: Any = None, seed: int = 0,
                  **kwargs: Any) -> Simulator:
        """A :class:`Simulator` on this task from :attr:`initial_params` (full participation by default).

        Per-client stores default to the task's dtype (the engine's default is float32 storage,
        which would round float64 solver states such as SCAFFOLD's ``c_i``)."""
        if participation is None:
            from fedhet.participation.full import FullParticipation
            participation = FullParticipation()
        if "store_options" not in kwargs and self.task.dtype == torch.float64:
            kwargs["store_options"] = StoreOptions(dtype="float64", device=str(self.task.device))
        return Simulator(self.task, participation=participation, solver=solver, server=server, seed=seed,
                         params=self.initial_params, **kwargs)


def _solve(design: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    # gelsd (SVD-based) is the most robust LAPACK driver; only available on CPU.
    return torch.linalg.lstsq(design.cpu(), target.cpu().unsqueeze(-1), driver="gelsd").solution.squeeze(-1)


def make_least_squares(*, num_clients: int = 4, dim: int = 3, examples_per_client: int | Sequence[int] = 16,
                       optimum_spread: float = 1.0, scale_spread: float = 0.5, noise: float = 0.1,
                       bias: bool = False, seed: int = 0, dtype: torch.dtype = torch.float64,
                       device: torch.device | str = "cpu") -> LeastSquaresProblem:
    """Draw a federated least-squares problem (see the module docstring); deterministic in ``seed``.

    ``examples_per_client`` is one size for everyone or one per client; each must be at least the
    number of parameters ``p`` so that every client's own optimum is unique.
    """
    num_params = dim + int(bias)
    if num_clients < 1 or dim < 1:
        raise ValueError(f"need num_clients >= 1 and dim >= 1, got num_clients={num_clients}, dim={dim}")
    sizes = ([int(examples_per_client)] * num_clients if isinstance(examples_per_client, int)
             else [int(n) for n in examples_per_client])
    if len(sizes) != num_clients:
        raise ValueError(f"examples_per_client has {len(sizes)} entries for {num_clients} clients")
    if min(sizes) < num_params:
        raise ValueError(f"every client needs at least p = {num_params} examples (dim + bias); got sizes {sizes}")
    if min(optimum_spread, scale_spread, noise) < 0:
        raise ValueError("optimum_spread, scale_spread and noise must be >= 0")

    generator = torch_generator(seed, "least_squares")
    center = torch.randn(num_params, generator=generator, dtype=torch.float64)
    designs, targets, optima = [], [], []
    for n in sizes:
        scales = torch.exp(scale_spread * torch.randn(dim, generator=generator, dtype=torch.float64))
        features = torch.randn(n, dim, generator=generator, dtype=torch.float64) * scales
        design = torch.cat([features, torch.ones(n, 1, dtype=torch.float64)], dim=1) if bias else features
        theta = center + optimum_spread * torch.randn(num_params, generator=generator, dtype=torch.float64)
        target = design @ theta + noise * torch.randn(n, generator=generator, dtype=torch.float64)
        designs.append(design)
        targets.append(target)
        optima.append(_solve(design, target))

    stacked_design, stacked_target = torch.cat(designs), torch.cat(targets)
    # (1/N) sum_i (1/n_i) sum_j r_ij^2 is least squares on rows scaled by 1/sqrt(n_i).
    row_scale = torch.cat([torch.full((n,), n ** -0.5, dtype=torch.float64) for n in sizes])
    optimum = _solve(stacked_design, stacked_target)
    uniform_optimum = _solve(stacked_design * row_scale.unsqueeze(-1), stacked_target * row_scale)
    initial = torch.randn(num_params, generator=generator, dtype=torch.float64).to(dtype)

    model = nn.Linear(dim, 1, bias=bias, dtype=dtype)
    with torch.no_grad():
        model.weight.copy_(initial[:dim].reshape(1, dim))
        if bias:
            model.bias.copy_(initial[dim:])
    offsets = torch.cumsum(torch.tensor([0] + sizes), 0)
    partition = [torch.arange(int(offsets[i]), int(offsets[i + 1])) for i in range(num_clients)]
    train = TensorDataset(stacked_design[:, :dim].to(dtype), stacked_target.to(dtype))
    task = build_task(model, train, train, partition, num_classes=1, device=torch.device(device), dtype=dtype)
    task.loss_fn = squared_loss

    def place(tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(device=torch.device(device), dtype=torch.float64)

    return LeastSquaresProblem(
        task=task, designs=[place(d) for d in designs], targets=[place(t) for t in targets],
        initial_params=initial.to(device=torch.device(device), dtype=dtype),
        optimum=place(optimum), uniform_optimum=place(uniform_optimum),
        client_optima=place(torch.stack(optima)))


def full_batch_options(problem: LeastSquaresProblem, options_cls: type, *, learning_rate: float, steps: int,
                       **values: Any) -> Any:
    """Client options (``options_cls``) for deterministic full-batch local gradient descent on
    ``problem``: ``batch_size`` is the largest client's size, so each of the ``steps`` local steps
    uses all of a client's data; ``values`` are the solver's own options."""
    batch = max(len(t) for t in problem.targets)
    return options_cls(learning_rate=learning_rate, batch_size=batch, steps=steps, **values)
