"""Issue 12, finding 7: divergence is detected on the loss and the update norms, not only the model."""
import math

import pytest
import torch

from fedhet.core.cohort import Cohort
from fedhet.engine.divergence import EXPLOSION_RATIO, divergence_reason
from fedhet.engine.metrics import cohort_metrics
from fedhet.engine.runner import run_experiment
from fedhet.engine.simulator import TrainingDivergedError


def _cohort(deltas, losses):
    deltas = torch.tensor(deltas, dtype=torch.float32)
    k = len(deltas)
    return Cohort(torch.arange(k), deltas, torch.ones(k, dtype=torch.int64), torch.ones(k, dtype=torch.int64),
                  torch.tensor(losses, dtype=torch.float32))


def _reason(cohort, params_before=None, params_after=None, server_metrics=None):
    d = cohort.deltas.shape[1]
    before = torch.zeros(d) if params_before is None else params_before
    after = torch.zeros(d) if params_after is None else params_after
    return divergence_reason(cohort, cohort_metrics(cohort), server_metrics or {}, before, after)


def test_a_healthy_round_is_not_divergence():
    assert _reason(_cohort([[0.1, -0.2], [0.3, 0.0]], [0.7, 0.6])) is None


def test_a_non_finite_loss_is_divergence_even_with_a_finite_model():
    reason = _reason(_cohort([[0.1, 0.2], [0.1, 0.2]], [0.5, math.inf]))
    assert reason is not None and "training loss non-finite for clients 1" in reason


def test_an_update_norm_overflowing_float32_is_divergence():
    # Entries of 1e30 are finite in float32 but their squared norm (1e60) is not.
    reason = _reason(_cohort([[1e30, 1e30], [1e30, -1e30]], [1.0, 1.0]))
    assert reason is not None and "update norm overflowed float32" in reason


def test_an_exploding_update_is_divergence_and_a_large_sane_one_is_not():
    x = torch.tensor([3.0, 4.0])                      # ||x|| = 5
    limit = EXPLOSION_RATIO * 5
    assert _reason(_cohort([[limit * 0.9, 0.0]], [1.0]), params_before=x) is None
    reason = _reason(_cohort([[limit * 1.1, 0.0]], [1.0]), params_before=x)
    assert reason is not None and "exploded" in reason


def test_a_non_finite_server_norm_is_divergence():
    reason = _reason(_cohort([[0.1, 0.2]], [0.5]), server_metrics={"pseudo_grad_norm": math.nan, "e_lud": math.inf})
    assert reason == "server pseudo_grad_norm = nan; mean training loss 0.5"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_logistic_regression_at_lr_1e30_stops_in_round_1(small_config, tmp_path, dtype):
    config = small_config("run.name=lr1e30", "client.learning_rate=1e30", f"run.dtype={dtype}")
    with pytest.raises(TrainingDivergedError) as info:
        run_experiment(config)
    message = str(info.value)
    assert message.startswith("round 1 diverged: ") and "\n" not in message
    assert ("overflowed" in message) if dtype == "float32" else ("exploded" in message)
    assert not (tmp_path / "lr1e30" / "summary.json").exists()


def test_a_sum_that_overflows_is_not_mistaken_for_a_non_finite_model_or_update():
    # The healthy path checks that sums are finite; float32 entries of 3e38 are finite but their sum
    # is not, which must fall back to the entries (and the update's norm rule still applies to them).
    big = torch.tensor([3e38, 3e38])
    assert not bool(torch.isfinite(big.sum()))
    assert _reason(_cohort([[0.1, 0.2]], [0.5]), params_after=big) is None
    reason = _reason(_cohort([[3e38, 3e38]], [0.5]))
    assert reason is not None and "update norm overflowed float32" in reason and "hold NaN" not in reason


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_one_non_finite_entry_is_found_in_the_update_and_in_the_model(bad):
    deltas = [[0.1, 0.2, 0.3], [0.4, bad, 0.6]]
    reason = _reason(_cohort(deltas, [0.5, 0.5]))
    assert reason is not None and "client updates hold NaN or Inf" in reason
    after = torch.tensor([1.0, bad, 2.0])
    reason = _reason(_cohort([[0.1, 0.2, 0.3]], [0.5]), params_after=after)
    assert reason is not None and "the model became non-finite" in reason
