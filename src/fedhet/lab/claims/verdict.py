"""The verdict rule: a difference with a 95% Student-t interval, five outcomes that partition the line, and
the papers' quantifiers (docs/claims.md, "The verdict rule").

**The difference.** For one comparison (a method against a baseline on one metric) over seeds: paired by
seed when both sides' seeds pair, else Welch's; the interval and its t quantile are
:mod:`fedhet.lab.report.difference` (shared with ``fedhet report --baseline``).

**Orientation.** The interval is turned so that positive means "as the paper claims": ``greater`` keeps
it, ``less`` (rounds to target) negates it, ``not_worse`` by a margin ``m`` shifts it by ``+m`` (so 0 is
"worse by exactly m"). With ``[lo, hi]`` the oriented interval and ``delta >= 0`` the comparison's minimal
effect (set in advance, in the metric's units, in the claim file), the outcomes are five regions of the
``(lo, hi)`` half-plane; each interval lies in exactly one, so the order of the checks does not matter
(:data:`REGIONS`; the tests shuffle it):

=====================  ===========================  ==========================================================
holds                  ``lo > 0 and hi >= delta``   an effect on the claimed side, as large as claimed allowed
smaller than claimed   ``lo > 0 and hi < delta``    real on the claimed side, and smaller than any gain the
                                                    paper calls one
not reproduced         ``lo <= 0 <= hi < delta``    no effect shown, and the data exclude the minimal one
contradicted           ``hi < 0``                   the interval excludes zero on the other side
inconclusive           ``lo <= 0 and hi >= delta``  the interval reaches both 0 and delta: more seeds would tell
=====================  ===========================  ==========================================================

With ``delta = 0`` (a ``not_worse`` comparison) "smaller than claimed" and "not reproduced" are empty.
Fewer than two seeds on a side (or two pairs) give no interval: inconclusive.

**The claim.** Only ``primary`` comparisons enter (``reported`` ones are shown beside them), and two primary
comparisons whose sides are the same method in effect count once (:func:`same_in_effect`). With ``n``
counted primary comparisons of which ``h`` hold, ``s`` are smaller than claimed, ``r`` not reproduced,
``c`` contradicted and ``i`` inconclusive (each at 95%), and ``c_adj`` contradicted at the Bonferroni-adjusted
level ``1 - 0.05 / n`` (:func:`adjusted_confidence`):

- ``all`` (the paper says every baseline, "ALL algorithms"): **holds** if ``h = n`` (a conjunction of 95%
  intervals needs no correction); **contradicted** if ``c_adj > 0``; **smaller than claimed** if
  ``s > 0 and h + s = n``; **not reproduced** if ``c_adj = 0`` and (``r + c > 0`` or ``s > 0 and i > 0``):
  the claim can no longer hold; **inconclusive** if ``s + r + c = 0`` and ``i > 0``;
- ``most`` (the paper says "most baselines", "almost all ... except"): **holds** if ``2h > n`` (one
  contradicted exception is what "most ... except" allows); **contradicted** if ``2c > n``; with
  ``2h <= n`` and ``2c <= n``: **inconclusive** if ``2(h + i) > n`` (it can still hold), else **smaller than
  claimed** if ``2(h + s) > n``, else **not reproduced**.

Each claim-level outcome is written as a condition of its own (:func:`claim_regions`), and the tests check
that every table of counts satisfies exactly one.

A claim whose runs are below its protocols' regime gets no verdict (``not tested``;
:mod:`fedhet.lab.claims.evaluate`).
"""
from __future__ import annotations

from typing import Callable, Mapping, Optional, Sequence

from fedhet.lab.report.difference import CONFIDENCE, Difference, paired_difference

HOLDS, SMALLER, NOT_REPRODUCED = "holds", "smaller than claimed", "not reproduced"
CONTRADICTED, INCONCLUSIVE = "contradicted", "inconclusive"
NOT_TESTED = "not tested"                       # below the protocol's regime: a trend, never a verdict
OUTCOMES = (HOLDS, SMALLER, NOT_REPRODUCED, CONTRADICTED, INCONCLUSIVE)
QUANTIFIERS = ("all", "most")
ROLES = ("primary", "reported")
# Two sides are the same method in effect when the 95% interval of their paired difference lies inside
# +-DUPLICATE_FRACTION * delta (same_in_effect): a tenth of the smallest effect the claim calls one.
DUPLICATE_FRACTION = 0.1

# The comparison's outcome regions in the oriented (lo, hi) half-plane (module docstring); disjoint and
# covering, so any order of the checks gives the same outcome.
REGIONS: dict[str, Callable[[float, float, float], bool]] = {
    HOLDS: lambda lo, hi, delta: lo > 0 and hi >= delta,
    SMALLER: lambda lo, hi, delta: lo > 0 and hi < delta,
    NOT_REPRODUCED: lambda lo, hi, delta: lo <= 0 <= hi < delta,
    CONTRADICTED: lambda lo, hi, delta: hi < 0,
    INCONCLUSIVE: lambda lo, hi, delta: lo <= 0 and hi >= delta,
}


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


def region(low: float, high: float, delta: float) -> str:
    """The one outcome region holding the oriented interval ``[low, high]`` (module docstring)."""
    if delta < 0 or low > high:
        raise ValueError(f"interval [{low}, {high}] with delta {delta}: need low <= high and delta >= 0")
    found = [name for name, inside in REGIONS.items() if inside(low, high, delta)]
    if len(found) != 1:         # the regions partition the half-plane; anything else is a bug here
        raise AssertionError(f"[{low}, {high}], delta {delta}: in {found or 'no region'}")
    return found[0]


def outcome(difference: Difference, direction: str, margin: float = 0.0, delta: float = 0.0) -> str:
    """One comparison's outcome by the rule of the module docstring."""
    _mean, low, high = oriented(difference, direction, margin)
    if low is None or high is None:
        return INCONCLUSIVE
    return region(low, high, delta)


def adjusted_confidence(n: int, confidence: float = CONFIDENCE) -> float:
    """Bonferroni: each of ``n`` intervals at ``1 - (1 - confidence) / n``, so that ``all`` is contradicted by
    one of ``n`` comparisons at the family's level, not at each one's."""
    if n < 1:
        raise ValueError(f"n = {n}: at least one comparison")
    return 1.0 - (1.0 - confidence) / n


def same_in_effect(first: Mapping[int, float], second: Mapping[int, float], delta: float) -> bool:
    """Whether two sides on the same seeds are the same method in effect: the 95% interval of their paired
    difference lies inside ``(-DUPLICATE_FRACTION * delta, +DUPLICATE_FRACTION * delta)``; a side is the same
    as itself. Needs ``delta > 0`` and two common seeds (else False)."""
    if first is second:
        return True
    if delta <= 0:
        return False
    difference = paired_difference(second, first)
    if difference.low is None or difference.high is None:
        return False
    bound = DUPLICATE_FRACTION * delta
    return -bound < difference.low and difference.high < bound


def claim_regions(quantifier: str) -> dict[str, Callable[[Mapping[str, int], int], bool]]:
    """Each claim-level outcome as a condition on the counts ``{outcome: k}`` and ``c_adj`` (docstring)."""
    if quantifier not in QUANTIFIERS:
        raise ValueError(f"quantifier {quantifier!r}; allowed: {', '.join(QUANTIFIERS)}")
    if quantifier == "all":
        def n(k: Mapping[str, int]) -> int:
            return sum(k.values())
        return {
            HOLDS: lambda k, adj: k[HOLDS] == n(k),
            CONTRADICTED: lambda k, adj: adj > 0,
            SMALLER: lambda k, adj: k[SMALLER] > 0 and k[HOLDS] + k[SMALLER] == n(k),
            NOT_REPRODUCED: lambda k, adj: adj == 0 and (k[NOT_REPRODUCED] + k[CONTRADICTED] > 0
                                                         or (k[SMALLER] > 0 and k[INCONCLUSIVE] > 0)),
            INCONCLUSIVE: lambda k, adj: (k[SMALLER] + k[NOT_REPRODUCED] + k[CONTRADICTED] == 0
                                          and k[INCONCLUSIVE] > 0),
        }

    def most(k: Mapping[str, int]) -> int:
        return sum(k.values())
    return {
        HOLDS: lambda k, adj: 2 * k[HOLDS] > most(k),
        CONTRADICTED: lambda k, adj: 2 * k[CONTRADICTED] > most(k),
        INCONCLUSIVE: lambda k, adj: (2 * k[HOLDS] <= most(k) and 2 * k[CONTRADICTED] <= most(k)
                                      and 2 * (k[HOLDS] + k[INCONCLUSIVE]) > most(k)),
        SMALLER: lambda k, adj: (2 * (k[HOLDS] + k[INCONCLUSIVE]) <= most(k)
                                 and 2 * (k[HOLDS] + k[SMALLER]) > most(k)),
        NOT_REPRODUCED: lambda k, adj: (2 * k[CONTRADICTED] <= most(k) and 2 * (k[HOLDS] + k[INCONCLUSIVE]) <= most(k)
                                        and 2 * (k[HOLDS] + k[SMALLER]) <= most(k)),
    }


def claim_verdict(outcomes: Sequence[str], quantifier: str, adjusted_contradicted: Optional[int] = None) -> str:
    """A claim's verdict from its counted primary comparisons' outcomes under ``all`` or ``most`` (module
    docstring). ``adjusted_contradicted``: how many of them are contradicted at :func:`adjusted_confidence`;
    required for ``all``, whose only way to be contradicted it is."""
    regions = claim_regions(quantifier)
    if not outcomes:
        return INCONCLUSIVE
    unknown = sorted(set(outcomes) - set(OUTCOMES))
    if unknown:
        raise ValueError(f"outcomes {unknown}; allowed: {', '.join(OUTCOMES)}")
    if quantifier == "all" and adjusted_contradicted is None:
        raise ValueError("an 'all' claim needs adjusted_contradicted: its comparisons contradicted at the "
                         "Bonferroni-adjusted level")
    adjusted = adjusted_contradicted or 0
    if adjusted > outcomes.count(CONTRADICTED):
        raise ValueError(f"{adjusted} contradicted at the adjusted level but {outcomes.count(CONTRADICTED)} at 95%: "
                         "an adjusted interval contains the 95% one")
    counts = {name: outcomes.count(name) for name in OUTCOMES}
    found = [name for name, holds in regions.items() if holds(counts, adjusted)]
    if len(found) != 1:
        raise AssertionError(f"{quantifier} {counts}, c_adj {adjusted}: in {found or 'no region'}")
    return found[0]
