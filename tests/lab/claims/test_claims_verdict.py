"""The verdict rule of fedhet.lab.claims.verdict on hand-made seed tables (paired and Welch intervals of
fedhet.lab.report.difference, the five outcomes with delta, `all` and `most`), and its t quantile against SciPy."""
from __future__ import annotations

import itertools
import math
import random

import pytest

from fedhet.lab.claims.verdict import (
    CONTRADICTED,
    HOLDS,
    INCONCLUSIVE,
    NOT_REPRODUCED,
    OUTCOMES,
    REGIONS,
    SMALLER,
    adjusted_confidence,
    claim_regions,
    claim_verdict,
    oriented,
    outcome,
    region,
    same_in_effect,
)
from fedhet.lab.report.difference import paired_difference, t_cdf, t_quantile, welch_difference


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


def test_t_quantile_matches_scipy_at_fractional_df():
    stats = pytest.importorskip("scipy.stats")
    for df in (1.3, 2.0, 3.7, 4.0, 7.25, 30.0):
        assert t_quantile(0.975, df) == pytest.approx(stats.t.ppf(0.975, df), rel=1e-9)


def test_paired_difference_by_hand():
    method = {1: 0.80, 2: 0.82, 3: 0.81}
    baseline = {1: 0.70, 2: 0.74, 3: 0.69}
    d = paired_difference(method, baseline)
    # differences 0.10, 0.08, 0.12: mean 0.10, sample std 0.02, half-width 4.3027 * 0.02 / sqrt(3)
    assert d.kind == "paired" and d.seeds == (1, 2, 3) and d.df == 2
    assert d.mean == pytest.approx(0.10)
    assert d.std == pytest.approx(0.02)
    half = 4.302652729749 * 0.02 / math.sqrt(3)
    assert d.low == pytest.approx(0.10 - half) and d.high == pytest.approx(0.10 + half)


def test_pairs_only_the_seeds_both_sides_have():
    d = paired_difference({1: 1.0, 2: 2.0, 3: 3.0}, {2: 1.5, 3: 2.0, 4: 9.0})
    assert d.seeds == (2, 3) and d.differences == (0.5, 1.0)


def test_welch_interval_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    method = {1: 0.81, 2: 0.84, 3: 0.80, 4: 0.86, 5: 0.83}
    baseline = {6: 0.78, 7: 0.70, 8: 0.75}               # other seeds: nothing pairs
    d = welch_difference(method, baseline)
    a, b = list(method.values()), list(baseline.values())
    reference = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert d.kind == "welch" and d.n_method == 5 and d.n_baseline == 3 and d.n == 3
    assert d.mean == pytest.approx(sum(a) / 5 - sum(b) / 3)
    assert (d.low, d.high) == (pytest.approx(reference.low, rel=1e-9), pytest.approx(reference.high, rel=1e-9))
    # Welch-Satterthwaite by hand: va = s_a^2 / 5, vb = s_b^2 / 3, df = (va + vb)^2 / (va^2 / 4 + vb^2 / 2)
    va, vb = stats.tvar(a) / 5, stats.tvar(b) / 3
    assert d.df == pytest.approx((va + vb) ** 2 / (va ** 2 / 4 + vb ** 2 / 2))
    assert welch_difference({1: 0.5}, baseline).low is None          # one seed on a side: no interval


def test_welch_is_wider_than_paired_when_seeds_share_their_noise():
    # the per-seed offsets (0.05, -0.05, 0.0) cancel in the paired differences, not in Welch's
    method, baseline = {1: 0.85, 2: 0.75, 3: 0.80}, {1: 0.83, 2: 0.73, 3: 0.78}
    paired, welch = paired_difference(method, baseline), welch_difference(method, baseline)
    assert paired.mean == pytest.approx(welch.mean) == pytest.approx(0.02)
    assert paired.low == pytest.approx(0.02) and welch.low < 0 < welch.high


def _d(low: float, high: float):
    """A paired difference of three seeds whose interval is exactly [low, high] (symmetric values)."""
    mean, half = (low + high) / 2, (high - low) / 2
    spread = half / 4.302652729749 * math.sqrt(3)         # the std giving that half-width at n = 3
    d = paired_difference({1: mean - spread, 2: mean, 3: mean + spread}, {1: 0.0, 2: 0.0, 3: 0.0})
    assert d.low == pytest.approx(low) and d.high == pytest.approx(high)
    return d


@pytest.mark.parametrize("low, high, delta, expected", [
    (0.005, 0.03, 0.01, HOLDS),                # clears zero and reaches delta
    (0.005, 0.008, 0.01, SMALLER),             # clears zero, excludes an effect as large as delta
    (0.0036, 0.0070, 0.01, SMALLER),           # 2026-11-25's FedSpeed vs FedAvg, +0.53 [+0.36, +0.70]: was "holds"
    (-0.03, -0.001, 0.01, CONTRADICTED),       # wholly on the wrong side
    (-0.02, 0.008, 0.01, NOT_REPRODUCED),      # reaches 0 but excludes an effect as large as delta
    (-0.02, 0.015, 0.01, INCONCLUSIVE),        # reaches both 0 and delta
    (-0.162, 0.062, 0.01, INCONCLUSIVE),       # 2026-11-23's [-16.2, +6.2]
])
def test_five_outcomes_of_a_greater_comparison(low, high, delta, expected):
    assert outcome(_d(low, high), "greater", delta=delta) == expected


@pytest.mark.parametrize("low, high, delta, expected", [
    # every edge of the five regions, exactly on it
    (0.0, 0.02, 0.01, INCONCLUSIVE),           # lo = 0 is not "> 0"
    (0.0, 0.005, 0.01, NOT_REPRODUCED),
    (0.001, 0.01, 0.01, HOLDS),                # hi = delta reaches delta
    (-0.01, 0.01, 0.01, INCONCLUSIVE),
    (-0.01, 0.0, 0.01, NOT_REPRODUCED),        # hi = 0 is not "< 0"
    (-0.01, -1e-12, 0.01, CONTRADICTED),
    (0.0, 0.0, 0.01, NOT_REPRODUCED),          # a zero-width interval at 0
    (0.01, 0.01, 0.01, HOLDS),
    (-0.01, 0.0, 0.0, INCONCLUSIVE),           # delta = 0 (not worse): no "smaller", no "not reproduced"
    (0.001, 0.002, 0.0, HOLDS),
])
def test_edges_of_the_regions(low, high, delta, expected):
    assert region(low, high, delta) == expected


def test_no_interval_gets_two_outcomes_and_the_order_of_checks_does_not_matter():
    edges = (-0.02, -0.01, -1e-9, 0.0, 1e-9, 0.005, 0.01 - 1e-9, 0.01, 0.01 + 1e-9, 0.02)
    generator = random.Random(0)
    orders = [list(REGIONS.items())]
    for _ in range(20):
        shuffled = list(REGIONS.items())
        generator.shuffle(shuffled)
        orders.append(shuffled)
    for delta in (0.0, 0.01):
        for low, high in itertools.combinations_with_replacement(edges, 2):
            inside = [name for name, holds in REGIONS.items() if holds(low, high, delta)]
            assert len(inside) == 1, (low, high, delta, inside)
            firsts = {next(name for name, holds in order if holds(low, high, delta)) for order in orders}
            assert firsts == {region(low, high, delta)}


def test_less_flips_the_interval():
    # rounds to target: method minus baseline [-30, -10] rounds is the claimed side (fewer rounds)
    faster = _d(-30.0, -10.0)
    assert oriented(faster, "less")[1:] == (pytest.approx(10.0), pytest.approx(30.0))
    assert outcome(faster, "less", delta=15) == HOLDS
    assert outcome(_d(10.0, 30.0), "less", delta=15) == CONTRADICTED
    assert outcome(_d(-5.0, 12.0), "less", delta=15) == NOT_REPRODUCED          # oriented [-12, 5] < 15
    assert outcome(_d(-20.0, 12.0), "less", delta=15) == INCONCLUSIVE


def test_not_worse_shifts_by_the_margin():
    # worse by 0.4-0.6 points, within a 1-point margin: holds; beyond a 0.2-point margin: contradicted
    d = _d(-0.006, -0.004)
    assert outcome(d, "not_worse", 0.01) == HOLDS
    assert outcome(d, "not_worse", 0.002) == CONTRADICTED
    assert outcome(_d(-0.02, 0.0), "not_worse", 0.01) == INCONCLUSIVE           # delta 0: never "not reproduced"


def test_one_seed_is_inconclusive_whatever_the_gap():
    d = paired_difference({1: 0.99}, {1: 0.10})
    assert d.n == 1 and d.low is None
    assert outcome(d, "greater", delta=0.01) == INCONCLUSIVE
    assert outcome(paired_difference({}, {}), "greater", delta=0.01) == INCONCLUSIVE


H, S, C, N, I = HOLDS, SMALLER, CONTRADICTED, NOT_REPRODUCED, INCONCLUSIVE


@pytest.mark.parametrize("outcomes, adjusted, all_, most", [
    ([H, H, H, H], 0, H, H),
    ([H, H, H, I], 0, I, H),          # most: 3 of 4 hold
    ([H, H, H, C], 1, C, H),          # most: one contradicted exception ("most ... except")
    ([H, H, H, C], 0, N, H),          # all: contradicted at 95% only, not at the adjusted level
    ([H, H, I, I], 0, I, I),          # most: half is not more than half; could still become 3
    ([H, H, N, N], 0, N, N),          # most: at best 2 of 4
    ([H, N, N, I], 0, N, N),
    ([C, C, C, H], 2, C, C),          # more than half contradicted
    ([H, S, S, H], 0, S, S),          # every one real on the claimed side, two below delta
    ([H, S, S, I], 0, N, S),          # all: can no longer hold; most: even with I holding, 2 of 4 is not more than half
    ([H, S, S, N], 0, N, S),          # most: 3 of 4 real, at most 1 can hold
    ([S, S, S], 0, S, S),
    ([I, I, I], 0, I, I),
    ([H], 0, H, H),
    ([], 0, I, I),
])
def test_all_and_most(outcomes, adjusted, all_, most):
    assert claim_verdict(outcomes, "all", adjusted_contradicted=adjusted) == all_
    assert claim_verdict(outcomes, "most") == most
    with pytest.raises(ValueError, match="allowed: all, most"):
        claim_verdict(outcomes, "some")


def test_all_needs_the_adjusted_count_and_it_cannot_exceed_the_95_percent_one():
    with pytest.raises(ValueError, match="adjusted_contradicted"):
        claim_verdict([H, C], "all")
    with pytest.raises(ValueError, match="adjusted interval contains"):
        claim_verdict([H, C], "all", adjusted_contradicted=2)


def test_every_table_of_counts_gets_exactly_one_claim_outcome():
    for quantifier in ("all", "most"):
        regions = claim_regions(quantifier)
        for n in range(1, 7):
            for counts in itertools.product(range(n + 1), repeat=len(OUTCOMES)):
                if sum(counts) != n:
                    continue
                table = dict(zip(OUTCOMES, counts))
                for adjusted in range(table[C] + 1):
                    inside = [name for name, holds in regions.items() if holds(table, adjusted)]
                    assert len(inside) == 1, (quantifier, table, adjusted, inside)


def test_adjusted_confidence_is_bonferroni():
    assert adjusted_confidence(1) == pytest.approx(0.95)
    assert adjusted_confidence(4) == pytest.approx(1 - 0.05 / 4)
    # the adjusted interval of the same seeds is wider: t(1 - 0.0125 / 2, 4) / t(0.975, 4)
    d95 = paired_difference({1: 0.1, 2: 0.3, 3: 0.2, 4: 0.25, 5: 0.15}, {s: 0.0 for s in range(1, 6)})
    dadj = paired_difference({1: 0.1, 2: 0.3, 3: 0.2, 4: 0.25, 5: 0.15}, {s: 0.0 for s in range(1, 6)},
                             adjusted_confidence(4))
    ratio = (dadj.high - dadj.mean) / (d95.high - d95.mean)
    assert ratio == pytest.approx(t_quantile(1 - 0.0125 / 2, 4) / t_quantile(0.975, 4))
    stats = pytest.importorskip("scipy.stats")
    assert t_quantile(1 - 0.0125 / 2, 4) == pytest.approx(stats.t.ppf(1 - 0.0125 / 2, 4), rel=1e-9)


def test_same_in_effect_within_a_tenth_of_delta():
    fedavg = {1: 0.7778, 2: 0.7711, 3: 0.7760, 4: 0.7723, 5: 0.7740}
    # FedProx at a degenerate mu: the same model to 0.01 points per seed
    fedprox = {s: v + (0.0001 if s % 2 else -0.0001) for s, v in fedavg.items()}
    assert same_in_effect(fedavg, fedprox, 0.01)
    assert same_in_effect(fedavg, fedavg, 0.0)                        # a side is the same as itself
    shifted = {s: v + 0.002 for s, v in fedavg.items()}               # 0.2 points apart on every seed
    assert not same_in_effect(fedavg, shifted, 0.01)
    assert not same_in_effect(fedavg, fedprox, 0.0)                   # no delta, no rule
    assert not same_in_effect({1: 0.5}, {1: 0.5}, 0.01)               # one seed: no interval
