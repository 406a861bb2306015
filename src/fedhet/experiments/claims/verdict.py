"""The verdict rule: paired differences over seeds, a Student-t interval, holds / not reproduced / inconclusive.

For one comparison (a method against a baseline on one metric), take each seed that both sides ran and
the **paired difference** ``d_s = method_s - baseline_s`` (same seed: same partition, participation and
initial model where the protocols share them). Over the ``n`` seeds: the mean ``d``, the sample standard
deviation ``s`` (``ddof = 1``) and the two-sided 95% Student-t interval
``d ± t(0.975, n - 1) s / sqrt(n)``.

With ``lo``, ``hi`` the interval's ends and ``m`` the margin:

=============  ====================  ======================  ==========================
direction      holds                 not reproduced          inconclusive
=============  ====================  ======================  ==========================
greater        ``lo > 0``            ``mean <= 0``           otherwise
less           ``hi < 0``            ``mean >= 0``           otherwise
not_worse      ``lo > -m``           ``mean <= -m``          otherwise
=============  ====================  ======================  ==========================

"Not reproduced" is decided by the mean, not by the interval lying wholly on the wrong side: with three
seeds ``t(0.975, 2) = 4.30``, so requiring ``hi < 0`` would call nearly every failure inconclusive; a
claim whose measured mean difference points the wrong way (or is zero) has not been reproduced here.
"Inconclusive" is a mean on the claimed side whose interval still reaches the other side.

Fewer than two paired seeds give no interval: **inconclusive**. So does a rounds-to-target comparison in
which no seed of either side reached the target (there is nothing to compare). A seed that did not reach
the target counts as ``run.rounds + 1``, a lower bound on its true value.

A claim **holds** when every comparison holds, is **not reproduced** when any comparison is not reproduced,
and is **inconclusive** otherwise.

The t quantile is computed here (the regularised incomplete beta function by its continued fraction and
bisection on the CDF), so the rule needs no SciPy.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

HOLDS, NOT_REPRODUCED, INCONCLUSIVE = "holds", "not reproduced", "inconclusive"
CONFIDENCE = 0.95


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz; Numerical Recipes 6.4)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def regularized_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b) for ``a, b > 0`` and ``0 <= x <= 1``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    tail = 0.5 * regularized_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on :func:`t_cdf`)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        high *= 2.0
    for _ in range(200):
        middle = 0.5 * (low + high)
        if t_cdf(middle, df) < p:
            low = middle
        else:
            high = middle
        if high - low <= 1e-12 * max(1.0, high):
            break
    return 0.5 * (low + high)


@dataclasses.dataclass(frozen=True)
class PairedDifference:
    """The paired differences ``method - baseline`` over the seeds both sides have, and their interval."""

    seeds: tuple[int, ...]
    differences: tuple[float, ...]
    mean: Optional[float]
    std: Optional[float]             # sample std (ddof = 1); None for fewer than two seeds
    low: Optional[float]             # the 95% Student-t interval; None for fewer than two seeds
    high: Optional[float]

    @property
    def n(self) -> int:
        return len(self.differences)


def paired_difference(method: dict[int, float], baseline: dict[int, float],
                      confidence: float = CONFIDENCE) -> PairedDifference:
    """Pair ``method`` and ``baseline`` (seed -> value) on their common seeds; mean, std and t interval."""
    seeds = tuple(sorted(set(method) & set(baseline)))
    diffs = tuple(float(method[s]) - float(baseline[s]) for s in seeds)
    n = len(diffs)
    if n == 0:
        return PairedDifference(seeds, diffs, None, None, None, None)
    mean = sum(diffs) / n
    if n < 2:
        return PairedDifference(seeds, diffs, mean, None, None, None)
    std = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = t_quantile(0.5 + confidence / 2.0, n - 1) * std / math.sqrt(n)
    return PairedDifference(seeds, diffs, mean, std, mean - half, mean + half)


def verdict(difference: PairedDifference, direction: str, margin: float = 0.0) -> str:
    """``holds`` / ``not reproduced`` / ``inconclusive`` by the rule of the module docstring."""
    if difference.n < 2 or difference.low is None or difference.high is None or difference.mean is None:
        return INCONCLUSIVE
    mean, low, high = difference.mean, difference.low, difference.high
    if direction == "greater":
        return HOLDS if low > 0 else NOT_REPRODUCED if mean <= 0 else INCONCLUSIVE
    if direction == "less":
        return HOLDS if high < 0 else NOT_REPRODUCED if mean >= 0 else INCONCLUSIVE
    if direction == "not_worse":
        return HOLDS if low > -margin else NOT_REPRODUCED if mean <= -margin else INCONCLUSIVE
    raise ValueError(f"direction {direction!r}; allowed: greater, less, not_worse")


def combine(verdicts: Sequence[str]) -> str:
    """A claim's verdict from its comparisons': holds if all hold, not reproduced if any is, else inconclusive."""
    if verdicts and all(v == HOLDS for v in verdicts):
        return HOLDS
    if any(v == NOT_REPRODUCED for v in verdicts):
        return NOT_REPRODUCED
    return INCONCLUSIVE
