"""The verdict rule of fedhet.experiments.claims.verdict on hand-made seed tables, and its t quantile."""
from __future__ import annotations

import math

import pytest

from fedhet.experiments.claims.verdict import (HOLDS, INCONCLUSIVE, NOT_REPRODUCED, combine, paired_difference,
                                               t_cdf, t_quantile, verdict)


@pytest.mark.parametrize("df, expected", [
    # Two-sided 95% critical values from a printed t table (e.g. NIST/SEMATECH e-Handbook, Table 1.3.6.7.2).
    (1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (9, 2.262), (29, 2.045), (100, 1.984),
])
def test_t_quantile_matches_the_printed_table(df, expected):
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=5e-4)


def test_t_cdf_closed_forms():
    # df = 1 is the Cauchy distribution: F(t) = 1/2 + atan(t)/pi; df = 2: F(t) = 1/2 + t / (2 sqrt(2 + t^2)).
    for t in (-3.0, -0.4, 0.0, 0.7, 5.0):
        assert t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)
        assert t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-12)
    assert t_quantile(0.025, 5) == pytest.approx(-t_quantile(0.975, 5))


def test_paired_difference_by_hand():
    method = {1: 0.80, 2: 0.82, 3: 0.81}
    baseline = {1: 0.70, 2: 0.74, 3: 0.69}
    d = paired_difference(method, baseline)
    # differences 0.10, 0.08, 0.12: mean 0.10, sample std 0.02, half-width 4.3027 * 0.02 / sqrt(3)
    assert d.seeds == (1, 2, 3)
    assert d.mean == pytest.approx(0.10)
    assert d.std == pytest.approx(0.02)
    half = 4.302652729749 * 0.02 / math.sqrt(3)
    assert d.low == pytest.approx(0.10 - half) and d.high == pytest.approx(0.10 + half)


def test_pairs_only_the_seeds_both_sides_have():
    d = paired_difference({1: 1.0, 2: 2.0, 3: 3.0}, {2: 1.5, 3: 2.0, 4: 9.0})
    assert d.seeds == (2, 3) and d.differences == (0.5, 1.0)


def test_greater_holds_when_the_interval_is_above_zero():
    d = paired_difference({1: 0.80, 2: 0.82, 3: 0.81}, {1: 0.70, 2: 0.74, 3: 0.69})
    assert verdict(d, "greater") == HOLDS


def test_greater_not_reproduced_when_the_mean_is_not_positive():
    # mean -0.01 with an interval reaching above 0: the mean decides "not reproduced"
    d = paired_difference({1: 0.70, 2: 0.75, 3: 0.69}, {1: 0.72, 2: 0.71, 3: 0.74})
    assert d.mean < 0 < d.high
    assert verdict(d, "greater") == NOT_REPRODUCED
    tie = paired_difference({1: 0.7, 2: 0.8}, {1: 0.7, 2: 0.8})
    assert verdict(tie, "greater") == NOT_REPRODUCED


def test_greater_inconclusive_when_the_interval_covers_zero():
    d = paired_difference({1: 0.75, 2: 0.70, 3: 0.78}, {1: 0.70, 2: 0.72, 3: 0.71})
    assert d.mean > 0 > d.low
    assert verdict(d, "greater") == INCONCLUSIVE


def test_one_seed_is_inconclusive_whatever_the_gap():
    d = paired_difference({1: 0.99}, {1: 0.10})
    assert d.n == 1 and d.low is None
    assert verdict(d, "greater") == INCONCLUSIVE
    assert verdict(paired_difference({}, {}), "greater") == INCONCLUSIVE


def test_less_mirrors_greater():
    faster = paired_difference({1: 20.0, 2: 22.0, 3: 21.0}, {1: 40.0, 2: 41.0, 3: 45.0})
    slower = paired_difference({1: 50.0, 2: 52.0, 3: 41.0}, {1: 40.0, 2: 41.0, 3: 45.0})
    assert verdict(faster, "less") == HOLDS
    assert verdict(slower, "less") == NOT_REPRODUCED


def test_not_worse_uses_the_margin():
    # differences -0.005, -0.004, -0.006: worse by half a point, within a 1-point margin
    d = paired_difference({1: 0.795, 2: 0.796, 3: 0.794}, {1: 0.80, 2: 0.80, 3: 0.80})
    assert verdict(d, "not_worse", 0.01) == HOLDS
    assert verdict(d, "not_worse", 0.0) == NOT_REPRODUCED
    noisy = paired_difference({1: 0.77, 2: 0.81, 3: 0.78}, {1: 0.80, 2: 0.80, 3: 0.80})   # mean -0.0133
    assert verdict(noisy, "not_worse", 0.02) == INCONCLUSIVE
    assert verdict(noisy, "not_worse", 0.01) == NOT_REPRODUCED


def test_a_claim_combines_its_comparisons():
    assert combine([HOLDS, HOLDS]) == HOLDS
    assert combine([HOLDS, INCONCLUSIVE]) == INCONCLUSIVE
    assert combine([INCONCLUSIVE, NOT_REPRODUCED, HOLDS]) == NOT_REPRODUCED
    assert combine([]) == INCONCLUSIVE
