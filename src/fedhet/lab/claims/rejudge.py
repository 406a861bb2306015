"""A published ``claims.json`` record judged again under the current verdict rule, without running anything.

A record keeps every comparison's per-seed values on both sides (``method_side.values``,
``baseline_side.values``) and whether its difference was paired or Welch's. From those alone the difference,
its 95% interval, the outcome (:func:`fedhet.lab.claims.verdict.outcome`), the duplicates and the adjusted
intervals (:func:`fedhet.lab.claims.evaluate.settle`) and each claim's verdict are computed again, so a change of
rule can be shown on the runs that were judged under the old one (docs/claims.md, "History"). What a record
cannot give again is kept as written: a claim recorded as ``not tested`` stays untested (its trend is
recomputed), and a rounds-to-target comparison that no seed of either side reached stays inconclusive.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from fedhet.errors import FedhetError
from fedhet.lab.claims.definitions import Claim, Comparison, Side
from fedhet.lab.claims.evaluate import ClaimResult, ComparisonResult, SideValues, settle
from fedhet.lab.claims.verdict import INCONCLUSIVE, NOT_TESTED, outcome
from fedhet.lab.report.difference import paired_difference, welch_difference
from fedhet.lab.report.stats import describe

NOBODY_REACHED = "no seed of either side reached the target"


class RecordError(FedhetError, ValueError):
    """A ``claims.json`` record lacks what judging it again needs; the message names the claim and key."""


def _side(text: str) -> Side:
    protocol, _, method = text.partition("/")
    return Side(protocol, method)


def _values(where: str, side: Mapping[str, Any]) -> dict[int, float]:
    values = side.get("values")
    if not isinstance(values, Mapping):
        raise RecordError(f"{where}: no per-seed values; a record written before values were kept cannot be "
                          "judged again")
    return {int(seed): float(value) for seed, value in values.items()}


def _comparison_result(where: str, item: Mapping[str, Any], tested: bool) -> ComparisonResult:
    comparison = Comparison(_side(item["method"]), _side(item["baseline"]), item["metric"], item["direction"],
                            float(item.get("margin") or 0.0), item.get("paper") or "", float(item.get("delta") or 0.0),
                            item.get("role", "primary"), item.get("target"))
    sides = []
    for key, side in (("method_side", comparison.method), ("baseline_side", comparison.baseline)):
        raw = item.get(key) or {}
        values = _values(f"{where} {key}", raw)
        sides.append(SideValues(side, (), values, describe(list(values.values())), int(raw.get("missing", 0)),
                                raw.get("lr_source", "")))
    method, baseline = sides
    kind = (item.get("difference") or {}).get("kind", "paired")
    difference = (paired_difference(method.values, baseline.values) if kind == "paired"
                  else welch_difference(method.values, baseline.values))
    result = outcome(difference, comparison.direction, comparison.margin, comparison.delta)
    note = ""
    if NOBODY_REACHED in (item.get("note") or ""):
        result, note = INCONCLUSIVE, NOBODY_REACHED
    if tested:
        return ComparisonResult(comparison, method, baseline, difference, result, note)
    return ComparisonResult(comparison, method, baseline, difference, NOT_TESTED, note, trend=result)


def rejudge(record: Mapping[str, Any], source: str | Path = "claims.json") -> list[ClaimResult]:
    """Every claim of ``record`` judged under the current rule (module docstring)."""
    claims = record.get("claims")
    if not isinstance(claims, list):
        raise RecordError(f"{source}: no \"claims\" list; is it a claims.json of `fedhet claims report`?")
    results = []
    for raw in claims:
        where = f"{source}: claim {raw.get('id', '?')}"
        tested = raw.get("verdict") != NOT_TESTED
        comparisons = tuple(_comparison_result(f"{where}, {c.get('method')} vs {c.get('baseline')}", c, tested)
                            for c in raw.get("comparisons", []))
        claim = Claim(raw["id"], Path(str(source)), raw.get("paper", ""), raw.get("source", ""),
                      raw.get("statement", ""), raw.get("paper_protocol", ""), raw.get("here", ""),
                      tuple(c.comparison for c in comparisons), raw.get("quantifier", "all"))
        below = tuple(raw.get("below_regime") or ()) or (() if tested else ("not tested in the record",))
        results.append(ClaimResult(claim, settle(comparisons), below))
    return results
