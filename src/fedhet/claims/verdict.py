"""The verdict rule: a difference with a 95% Student-t interval, four outcomes, and the papers' quantifiers.

**The difference.** For one comparison (a method against a baseline on one metric) over seeds: paired by
seed when both sides' seeds pair, else Welch's; the interval and its t quantile are
:mod:`fedhet.report.difference` (shared with ``fedhet report --baseline``).

**Orientation.** The interval is turned so that positive means "as the paper claims": ``greater`` keeps
it, ``less`` (rounds to target) negates it, ``not_worse`` by a margin ``m`` shifts it by ``+m`` (so 0 is
"worse by exactly m"). With ``[lo, hi]`` the oriented interval and ``delta >= 0`` the comparison's minimal
effect (set in advance, in the metric's units, in the claim file):

================  ==========================================================================
holds             ``lo > 0``: the interval excludes zero on the claimed side
contradicted      ``hi < 0``: the interval excludes zero on the other side
not reproduced    ``hi < delta``: the data exclude an effect as large as the minimal one
inconclusive      otherwise (the interval reaches both 0 and delta)
================  ==========================================================================

Fewer than two seeds on a side (or two pairs) give no interval: inconclusive.

**The claim.** Only ``primary`` comparisons enter; ``reported`` ones are shown beside them. With ``n``
primary comparisons of which ``h`` hold, ``c`` are contradicted and ``i`` inconclusive:

- ``all`` (the paper says every baseline, "ALL algorithms"): **holds** if ``h = n``; **contradicted** if
  ``c > 0``; **not reproduced** if any is not reproduced; otherwise **inconclusive**;
- ``most`` (the paper says "most baselines", "almost all"): **holds** if ``h > n / 2`` and ``c = 0``;
  **contradicted** if ``c > n / 2``; **not reproduced** if the claim can no longer hold (``c > 0``, or
  ``h + i <= n / 2``: even if every inconclusive comparison held, no more than half would); otherwise
  **inconclusive**.

A claim whose runs are below its protocols' regime gets no verdict (``not tested``;
:mod:`fedhet.claims.evaluate`). docs/claims.md, "The verdict rule", states the rule with its
reasons.
"""
from __future__ import annotations

from typing import Optional, Sequence

from fedhet.report.difference import Difference

HOLDS, CONTRADICTED, NOT_REPRODUCED, INCONCLUSIVE = "holds", "contradicted", "not reproduced", "inconclusive"
NOT_TESTED = "not tested"                       # below the protocol's regime: a trend, never a verdict
OUTCOMES = (HOLDS, CONTRADICTED, NOT_REPRODUCED, INCONCLUSIVE)
QUANTIFIERS = ("all", "most")
ROLES = ("primary", "reported")


def oriented(difference: Difference, direction: str, margin: float = 0.0) -> tuple[Optional[float], ...]:
    """``(mean, lo, hi)`` turned so that positive is the claimed side (module docstring, "Orientation")."""
    if direction not in ("greater", "less", "not_worse"):
        raise ValueError(f"direction {direction!r}; allowed: greater, less, not_worse")
    sign = -1.0 if direction == "less" else 1.0
    shift = margin if direction == "not_worse" else 0.0

    def turn(value: Optional[float]) -> Optional[float]:
        return None if value is None else sign * value + shift

    low, high = turn(difference.low), turn(difference.high)
    if low is not None and high is not None and low > high:
        low, high = high, low
    return turn(difference.mean), low, high


def outcome(difference: Difference, direction: str, margin: float = 0.0, delta: float = 0.0) -> str:
    """One comparison's outcome by the rule of the module docstring."""
    _mean, low, high = oriented(difference, direction, margin)
    if low is None or high is None:
        return INCONCLUSIVE
    if low > 0:
        return HOLDS
    if high < 0:
        return CONTRADICTED
    if high < delta:
        return NOT_REPRODUCED
    return INCONCLUSIVE


def claim_verdict(outcomes: Sequence[str], quantifier: str) -> str:
    """A claim's verdict from its primary comparisons' outcomes under ``all`` or ``most`` (module docstring)."""
    if quantifier not in QUANTIFIERS:
        raise ValueError(f"quantifier {quantifier!r}; allowed: {', '.join(QUANTIFIERS)}")
    n = len(outcomes)
    if n == 0:
        return INCONCLUSIVE
    holds, contradicted = outcomes.count(HOLDS), outcomes.count(CONTRADICTED)
    inconclusive = outcomes.count(INCONCLUSIVE)
    if quantifier == "all":
        if holds == n:
            return HOLDS
        if contradicted:
            return CONTRADICTED
        return NOT_REPRODUCED if NOT_REPRODUCED in outcomes else INCONCLUSIVE
    if 2 * holds > n and not contradicted:
        return HOLDS
    if 2 * contradicted > n:
        return CONTRADICTED
    if contradicted or 2 * (holds + inconclusive) <= n:
        return NOT_REPRODUCED
    return INCONCLUSIVE
