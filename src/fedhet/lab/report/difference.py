"""The difference of two sets of per-seed values with its Student-t interval, paired or Welch.

**The difference.** For one comparison (a method against a baseline on one metric) over seeds:

- *paired* when both sides' seeds pair (the same protocol, or protocols whose partition and
  participation are the same, so seed ``s`` gives both sides the same clients and draws): the
  differences ``d_s = method_s - baseline_s`` on the seeds both sides have, their mean ``d``, sample std
  ``s`` (``ddof = 1``) and the interval ``d ± t(0.975, n - 1) s / sqrt(n)``;
- *Welch* (unpaired) otherwise: ``d = mean(method) - mean(baseline)``, standard error
  ``se = sqrt(s_m^2 / n_m + s_b^2 / n_b)`` and the interval ``d ± t(0.975, df) se`` with the
  Welch-Satterthwaite ``df = se^4 / ((s_m^2 / n_m)^2 / (n_m - 1) + (s_b^2 / n_b)^2 / (n_b - 1))``.

Fewer than two seeds on a side (or two pairs) give no interval. The claims' verdicts
(:mod:`fedhet.lab.claims.verdict`, docs/claims.md "The verdict rule") and ``fedhet report --baseline``
(:mod:`fedhet.lab.report.baseline`) both read their intervals from here.

The t quantile is computed here (the regularised incomplete beta function by its continued fraction and
bisection on the CDF), so the interval needs no SciPy.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Optional, Sequence

PAIRED, WELCH = "paired", "welch"
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
class Difference:
    """``method - baseline`` over seeds with its interval (module docstring); ``kind`` is paired or welch."""

    kind: str
    seeds: tuple[int, ...]           # paired: the seeds both sides have; welch: every seed of either side
    differences: tuple[float, ...]   # paired: per-seed differences; welch: ()
    mean: Optional[float]
    std: Optional[float]             # paired: sample std of the differences; welch: None
    se: Optional[float]              # the standard error of the mean difference
    df: Optional[float]              # degrees of freedom of the t quantile
    low: Optional[float]             # the interval; None without one
    high: Optional[float]
    n_method: int
    n_baseline: int

    @property
    def n(self) -> int:
        """The count behind the interval: pairs (paired), the smaller side (welch)."""
        return len(self.differences) if self.kind == PAIRED else min(self.n_method, self.n_baseline)


def _half_width(se: float, df: float, confidence: float) -> float:
    return t_quantile(0.5 + confidence / 2.0, df) * se


def paired_difference(method: Mapping[int, float], baseline: Mapping[int, float],
                      confidence: float = CONFIDENCE) -> Difference:
    """Pair ``method`` and ``baseline`` (seed -> value) on their common seeds; mean, std and t interval."""
    seeds = tuple(sorted(set(method) & set(baseline)))
    diffs = tuple(float(method[s]) - float(baseline[s]) for s in seeds)
    n = len(diffs)
    if n == 0:
        return Difference(PAIRED, seeds, diffs, None, None, None, None, None, None, len(method), len(baseline))
    mean = sum(diffs) / n
    if n < 2:
        return Difference(PAIRED, seeds, diffs, mean, None, None, None, None, None, len(method), len(baseline))
    std = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    se = std / math.sqrt(n)
    half = _half_width(se, n - 1, confidence)
    return Difference(PAIRED, seeds, diffs, mean, std, se, float(n - 1), mean - half, mean + half,
                      len(method), len(baseline))


def _mean_var(values: Sequence[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    return mean, sum((v - mean) ** 2 for v in values) / (len(values) - 1)


def welch_difference(method: Mapping[int, float], baseline: Mapping[int, float],
                     confidence: float = CONFIDENCE) -> Difference:
    """The unpaired (Welch) difference of means of ``method`` and ``baseline`` (module docstring)."""
    a, b = [float(v) for v in method.values()], [float(v) for v in baseline.values()]
    seeds = tuple(sorted(set(method) | set(baseline)))
    mean = sum(a) / len(a) - sum(b) / len(b) if a and b else None
    if len(a) < 2 or len(b) < 2:
        return Difference(WELCH, seeds, (), mean, None, None, None, None, None, len(a), len(b))
    (mean_a, var_a), (mean_b, var_b) = _mean_var(a), _mean_var(b)
    mean = mean_a - mean_b          # the same sums as above, now known to exist
    va, vb = var_a / len(a), var_b / len(b)
    se = math.sqrt(va + vb)
    if se == 0.0:                   # both sides constant: the difference is exact (df only for the record)
        df = float(len(a) + len(b) - 2)
        return Difference(WELCH, seeds, (), mean, None, 0.0, df, mean, mean, len(a), len(b))
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    half = _half_width(se, df, confidence)
    return Difference(WELCH, seeds, (), mean, None, se, df, mean - half, mean + half, len(a), len(b))
