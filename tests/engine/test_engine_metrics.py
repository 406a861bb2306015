import math

import torch

from fedhet.core.cohort import Cohort
from fedhet.engine.metrics import cohort_metrics


def _cohort(updates: torch.Tensor) -> Cohort:
    k = updates.shape[0]
    ones = torch.ones(k, dtype=torch.int64)
    # deltas = -g
    return Cohort(torch.arange(k), -updates, ones, ones, torch.zeros(k, dtype=updates.dtype))


def _reference(updates: torch.Tensor) -> dict[str, float]:
    """FedAWARE Section 5, transcribed with Python loops in float64."""
    rows = [row.to(torch.float64) for row in updates]
    k = len(rows)
    norms = [float(torch.sqrt((r * r).sum())) for r in rows]
    mean = sum(rows) / k
    e_lud = math.sqrt(sum(n * n for n in norms) / k / float((mean * mean).sum()))
    coherence = sum(float((rows[i] * rows[j]).sum()) / (norms[i] * norms[j])
                    for i in range(k) for j in range(k) if i != j)
    return {"e_lud": e_lud, "max_update_norm": max(norms), "min_update_norm": min(norms),
            "client_coherence": coherence}


def test_metrics_match_the_definitions():
    torch.manual_seed(0)
    updates = torch.randn(6, 50, dtype=torch.float64) + 0.3
    got, expected = cohort_metrics(_cohort(updates)), _reference(updates)
    for key, value in expected.items():
        assert math.isclose(got[key], value, rel_tol=1e-10, abs_tol=1e-12), key


def test_identical_updates_have_e_lud_one_and_full_coherence():
    updates = torch.randn(1, 20, dtype=torch.float64).repeat(4, 1)
    got = cohort_metrics(_cohort(updates))
    assert math.isclose(got["e_lud"], 1.0, rel_tol=1e-12)
    assert math.isclose(got["client_coherence"], 4 * 3, rel_tol=1e-12)


def test_nearly_cancelling_float32_updates_keep_e_lud_precise():
    torch.manual_seed(1)
    base = torch.randn(200_000)
    updates = torch.stack([base, -base + 1e-3 * torch.randn(200_000), base * 0.5, -base * 0.5])
    got = cohort_metrics(_cohort(updates))["e_lud"]
    assert math.isclose(got, _reference(updates)["e_lud"], rel_tol=1e-5)
    assert got > 100  # the updates nearly cancel
