"""Per-round diagnostics computed identically for every algorithm from the round's uploads.

FedAWARE (AISTATS 2025), Section 5: local update diversity

    e-LUD_t = sqrt( (1/|S|) sum_S ||g_i||^2 / || (1/|S|) sum_S g_i ||^2 ),   e-LUDD = mean_t e-LUD_t

(>= 1, equal to 1 when all updates coincide; large when they cancel). Also the largest and smallest
client update norms and the client coherence: the sum of off-diagonal pairwise cosines of the
round's updates (docs/algorithms.md section 3).
"""
from __future__ import annotations

import math

import torch

from fedhet.core.cohort import Cohort


def cohort_metrics(cohort: Cohort) -> dict[str, float]:
    """e-LUD, the largest and smallest update norms and the client coherence of one round.

    One ``K x K`` Gram product in the uploads' dtype gives the norms and cosines; the norm of the mean
    update is accumulated in float64 from the mean vector, not from the Gram sum, because it is the
    quantity that suffers cancellation when updates nearly cancel (large e-LUD).
    """
    if len(cohort) == 0:
        return {}
    # Every quantity here is invariant under g_k -> -g_k, so the deltas serve as they are (no negated
    # [K, d] copy per round).
    updates = cohort.deltas
    gram = (updates @ updates.T).to(torch.float64)
    norms_sq = gram.diagonal().clamp_min(0)
    norms = norms_sq.sqrt()
    mean_update = updates.mean(dim=0).to(torch.float64)
    mean_norm_sq = float(mean_update @ mean_update)
    e_lud = math.sqrt(float(norms_sq.mean()) / mean_norm_sq) if mean_norm_sq > 0 else math.inf
    inverse = 1.0 / norms.clamp_min(1e-30)
    cosines = gram * inverse.unsqueeze(0) * inverse.unsqueeze(1)
    coherence = float(cosines.sum() - cosines.diagonal().sum())
    return {"e_lud": e_lud, "max_update_norm": float(norms.max()), "min_update_norm": float(norms.min()),
            "client_coherence": coherence}
