"""The sharpness-aware ascent point (Foret et al., ICLR 2021): a building block of the solvers that
take their gradient at a perturbed point (FedSAM, FedSpeed)."""
from __future__ import annotations

import torch

NORM_GUARD = 1e-12


def ascent_point(w: torch.Tensor, grad: torch.Tensor, radius: float) -> torch.Tensor:
    """``w + radius grad / ||grad||`` per row of the last dimension (a new tensor); ``||grad||`` is
    guarded by :data:`NORM_GUARD`, so a zero gradient gives no perturbation instead of NaN."""
    norm = torch.linalg.vector_norm(grad, dim=-1, keepdim=True)
    return w + grad * (radius / (norm + NORM_GUARD))
