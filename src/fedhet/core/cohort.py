"""What a round's participating clients send back, stacked."""
from __future__ import annotations

import dataclasses

import torch

# The extra holding each client's FedNova a_i (fedhet.client.base.with_effective_steps).
EFFECTIVE_STEPS = "effective_steps"


@dataclasses.dataclass
class Cohort:
    """The uploads of one round's participating clients, row ``k`` for client ``client_ids[k]``.

    ``deltas[k] = y_k - x`` (model delta, docs/algorithms.md section 1); the pseudo-gradient is
    ``g_k = -deltas[k]``. Solvers whose upload is not the plain model delta (FedSpeed's ``xhat``,
    FedADMM's dual-corrected change) put their effective delta here and say so. ``extras`` holds any
    other per-client uploads (e.g. SCAFFOLD's control-variate change), each with leading dim ``K``.
    """

    client_ids: torch.Tensor          # [K] int64, sorted
    deltas: torch.Tensor              # [K, d]
    num_examples: torch.Tensor        # [K] int64
    local_steps: torch.Tensor         # [K] int64
    train_loss: torch.Tensor          # [K] float, mean minibatch loss during local training
    extras: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.client_ids.numel())

    @property
    def pseudo_gradients(self) -> torch.Tensor:
        """``g_k = x - y_k``, the descent-direction convention of the servers."""
        return -self.deltas

    @classmethod
    def empty(cls, dim: int, dtype: torch.dtype, device: torch.device | str) -> "Cohort":
        def no_rows(*shape: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
            return torch.empty(0, *shape, dtype=dtype, device=device)

        return cls(no_rows(), no_rows(dim, dtype=dtype), no_rows(), no_rows(), no_rows(dtype=dtype))
