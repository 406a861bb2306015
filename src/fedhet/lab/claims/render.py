"""The claims table as text: cells shared by the terminal, Markdown and HTML, the JSON record, forest rows.

Accuracies are shown in percent (two decimals) and their differences in points; e-LUDD with two
decimals (three for differences); rounds to target with one. Each side is ``mean ± sample std`` over
its seeds; the difference is the paired (or Welch) mean with its 95% Student-t interval ``[low, high]``.
The terminal table fits :data:`TERMINAL_WIDTH` columns (the comparison's text is shortened when it must
be); ``claims.md`` keeps every detail. :func:`summary_from_json` renders a claims summary from a
``claims.json`` record, which docs/claims.md's "Latest verdicts" is generated from.
"""
from __future__ import annotations

import math
import textwrap
from typing import Any, Mapping, Optional, Sequence

from fedhet.lab.claims.definitions import Comparison
from fedhet.lab.claims.evaluate import NO_HEADROOM, ClaimResult, ComparisonResult, SideValues
from fedhet.lab.claims.planning import PENDING_GAP
from fedhet.lab.claims.verdict import NOT_TESTED, OUTCOMES, adjusted_confidence, oriented
from fedhet.lab.report.difference import CONFIDENCE
from fedhet.lab.report.forest import ForestRow

ACCURACY_METRICS = ("last_accuracy", "best_accuracy")
METRIC_NAMES = {"last_accuracy": "last-10% acc. (%)", "best_accuracy": "best acc. (%)", "e_ludd": "e-LUDD",
                "rounds_to_target": "rounds to target", "update_norm": "mean step length",
                "aware_cosine": "mean AWARE cosine"}
METRIC_SHORT = {"last_accuracy": "last acc", "best_accuracy": "best acc", "e_ludd": "e-LUDD",
                "rounds_to_target": "rounds", "update_norm": "step", "aware_cosine": "cosine"}
METRIC_UNITS = {"last_accuracy": "accuracy points", "best_accuracy": "accuracy points", "e_ludd": "e-LUDD",
                "rounds_to_target": "rounds", "update_norm": "step length", "aware_cosine": "cosine"}
DIRECTION_TEXT = {"greater": ">", "less": "<", "not_worse": "not worse than"}
SUMMARY_COLUMNS = ("claim", "verdict", "quantifier", "primary comparisons", "reported or duplicate", "paper",
                   "statement")
COLUMNS = ("claim", "comparison", "role", "metric", "outcome", "difference [95% CI]", "delta", "method (mean ± std)",
           "baseline (mean ± std)", "seeds", "paper's numbers", "lr source")
SUMMARY_VERDICT, COMPARISON_VERDICT = 1, 4           # the verdict's column in each table
TERMINAL_WIDTH = 100
NOT_TESTED_TEXT = "not tested at this scale"
NOT_TESTED_PENDING_TEXT = "not tested: tuning pending"


def metric_scale(metric: str) -> float:
    return 100.0 if metric in ACCURACY_METRICS else 1.0


def _digits(metric: str, difference: bool = False) -> int:
    if metric == "rounds_to_target":
        return 1
    if metric in ("update_norm", "aware_cosine"):
        return 4
    if metric == "e_ludd":
        return 3 if difference else 2
    return 2


def value_text(metric: str, mean: Optional[float], std: Optional[float]) -> str:
    if mean is None:
        return "–"
    scale, digits = metric_scale(metric), _digits(metric)
    text = f"{scale * mean:.{digits}f}"
    return text if std is None else f"{text} ± {scale * std:.{digits}f}"


def difference_text(result: ComparisonResult) -> str:
    d, metric = result.difference, result.comparison.metric
    if d.mean is None:
        return "–"
    scale, digits = metric_scale(metric), _digits(metric, difference=True)
    text = f"{scale * d.mean:+.{digits}f}"
    if d.low is None or d.high is None:
        return text
    return f"{text} [{scale * d.low:+.{digits}f}, {scale * d.high:+.{digits}f}]"


def delta_text(comparison: Comparison) -> str:
    """The minimal effect in the table's units (accuracy points, e-LUDD, rounds)."""
    return f"{metric_scale(comparison.metric) * comparison.delta:g}"


def side_text(side: SideValues, metric: str) -> str:
    text = value_text(metric, side.stat.mean, side.stat.std)
    return f"{text} ({side.missing} missing)" if side.missing else text


def comparison_text(comparison: Comparison) -> str:
    """``fedaware > fedavg [fedaware_dir01]``, or with both protocols when they differ."""
    m, b, relation = comparison.method, comparison.baseline, DIRECTION_TEXT[comparison.direction]
    if comparison.direction == "not_worse":
        scale = metric_scale(comparison.metric)
        unit = " pt" if comparison.metric in ACCURACY_METRICS else ""
        relation = f"not worse (margin {scale * comparison.margin:g}{unit}) than"
    if comparison.metric == "rounds_to_target" and comparison.target is not None:
        relation = f"{relation} (to {100 * comparison.target:g}%)"
    if m.protocol == b.protocol:
        return f"{m.method} {relation} {b.method} [{m.protocol}]"
    return f"{m.text} {relation} {b.text}"


def lr_tag(source: str) -> str:
    """``paper`` / ``untuned`` / ``tuned``: the first word of an ``lr_source``."""
    return source.split(":", 1)[0].strip()


def lr_text(result: ComparisonResult) -> str:
    tags = [lr_tag(result.method.lr_source), lr_tag(result.baseline.lr_source)]
    return tags[0] if tags[0] == tags[1] else " / ".join(tags)


def verdict_text(result: ComparisonResult) -> str:
    """The outcome; below the regime ``not tested (trend: ...)``; with the note in brackets."""
    text = f"{NOT_TESTED} (trend: {result.trend})" if result.verdict == NOT_TESTED else result.verdict
    return f"{text} ({result.note})" if result.note else text


def claim_verdict_text(claim: ClaimResult) -> str:
    if claim.tested:
        return claim.verdict
    if any(reason.startswith(NO_HEADROOM) for reason in claim.below_regime):
        return f"{NOT_TESTED}: {NO_HEADROOM} (trend: {claim.trend})"
    if any(PENDING_GAP in reason for reason in claim.below_regime):
        return f"{NOT_TESTED_PENDING_TEXT} (trend: {claim.trend})"
    return f"{NOT_TESTED_TEXT} (trend: {claim.trend})"


def role_text(result: ComparisonResult) -> str:
    return "primary (duplicate)" if result.duplicate_of else result.comparison.role


def comparison_cells(claim: ClaimResult, result: ComparisonResult) -> list[str]:
    c = result.comparison
    kind = " (Welch)" if result.difference.kind == "welch" else ""
    return [claim.claim.id, comparison_text(c), role_text(result), METRIC_NAMES[c.metric], verdict_text(result),
            difference_text(result) + kind, delta_text(c), side_text(result.method, c.metric),
            side_text(result.baseline, c.metric), str(result.difference.n), c.paper or "–", lr_text(result)]


def tally(outcomes: Sequence[str]) -> str:
    """``2 holds, 1 inconclusive`` in the rule's order of outcomes."""
    counts = {o: outcomes.count(o) for o in (*OUTCOMES, NOT_TESTED)}
    return ", ".join(f"{n} {o}" for o, n in counts.items() if n) or "none"


def summary_cells(claim: ClaimResult) -> list[str]:
    primary = [c.shown_outcome for c in claim.comparisons if c.counted]
    reported = [c.shown_outcome for c in claim.comparisons if not c.counted]
    return [claim.claim.id, claim_verdict_text(claim), claim.claim.quantifier, tally(primary),
            tally(reported) if reported else "–", f"{claim.claim.paper}, {claim.claim.source}",
            claim.claim.statement]


def rule_text() -> str:
    return (f"Difference = method - baseline as measured (rounds to target: negative = the method is faster), "
            "paired by seed when both sides share partition and participation, otherwise Welch's, with its "
            f"two-sided {100 * CONFIDENCE:g}% Student-t interval. The outcome reads that interval turned to the "
            "paper's side, [lo, hi] with > 0 the paper's side (rounds to target: the sign flips, fewer is the "
            "paper's side; not worse: shifted by the margin), as the forest plots show it. With delta the "
            "comparison's minimal effect, a comparison holds if lo > 0 and hi >= delta, is smaller than claimed if "
            "lo > 0 and hi < delta, not reproduced if lo <= 0 <= hi < delta, contradicted if hi < 0, inconclusive "
            "if lo <= 0 and hi >= delta. A claim's primary comparisons decide it, a duplicate (both sides the same "
            "method in effect as an earlier comparison's) counted once: 'all' holds when every one holds and is "
            "contradicted only by an interval at the Bonferroni-adjusted level; 'most' holds when more than half "
            "hold and is contradicted when more than half are. Reported comparisons are shown only. Below a "
            "protocol's regime: not tested, trends only. Accuracies in %, differences in points. "
            "Rule: docs/claims.md.")


def _aligned(rows: Sequence[Sequence[str]], *, width: int = TERMINAL_WIDTH, shrink: int = 0,
             indent: str = "") -> str:
    """Columns aligned; when the widest line exceeds ``width``, column ``shrink`` is cut (ending in "…")."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    over = len(indent) + sum(widths) + 2 * (len(widths) - 1) - width
    if over > 0:
        widths[shrink] = max(8, widths[shrink] - over)
    lines = []
    for row in rows:
        cells = [cell if len(cell) <= w else cell[:w - 1] + "…" for cell, w in zip(row, widths)]
        lines.append(indent + "  ".join(cell.ljust(w) for cell, w in zip(cells, widths)).rstrip())
    lines.insert(1, indent + "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _terminal_outcome(result: ComparisonResult) -> str:
    word = f"({result.trend})" if result.verdict == NOT_TESTED else result.verdict
    return word + ("" if result.counted else " [dup.]" if result.duplicate_of else " [rep.]")


def console_table(results: Sequence[ClaimResult], *, tier: str = "default") -> str:
    """The claims for a terminal, at most :data:`TERMINAL_WIDTH` columns: the verdict per claim, then each
    claim's comparisons (an outcome in brackets is a trend below the regime; [rep.] a reported one, [dup.] a
    primary one counted once with an earlier comparison that is the same in effect)."""
    summary = [["claim", "verdict", "primary comparisons"]]
    summary += [[r.claim.id, claim_verdict_text(r), f"{r.claim.quantifier}: {summary_cells(r)[3]}"] for r in results]
    blocks = [f"fedhet claims ({tier} tier)", "", _aligned(summary, shrink=2)]
    for claim in results:
        rows = [["comparison", "metric", "difference [95% CI]", "delta", "outcome"]]
        for result in claim.comparisons:
            rows.append([comparison_text(result.comparison), METRIC_SHORT[result.comparison.metric],
                         difference_text(result), delta_text(result.comparison), _terminal_outcome(result)])
        blocks += ["", f"{claim.claim.id}: {claim_verdict_text(claim)}", _aligned(rows, indent="  ")]
        for index, result in enumerate(claim.comparisons, 1):
            if result.note:
                blocks += textwrap.wrap(f"note {index}: {result.note}", TERMINAL_WIDTH - 2, initial_indent="  ",
                                        subsequent_indent="  ")
        reasons = list(dict.fromkeys(item.rsplit(" (", 1)[0] for item in claim.below_regime))
        blocks += [f"  {line}" for line in (textwrap.wrap(f"not tested because: {'; '.join(reasons)}", TERMINAL_WIDTH - 2)
                                            if reasons else [])]
    blocks += ["", *textwrap.wrap(rule_text(), TERMINAL_WIDTH), "Details: claims.md beside the report."]
    return "\n".join(blocks)


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_md(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _number(value: Optional[float]) -> Optional[float]:
    return value if value is not None and math.isfinite(value) else None


def forest_rows(results: Sequence[ClaimResult], metric_group: Sequence[str]) -> list[ForestRow]:
    """One row per comparison on a metric of ``metric_group``, oriented (> 0 is the paper's side) and in
    the table's units; below the regime the row is ``not tested`` (drawn light)."""
    rows = []
    for claim in results:
        for result in claim.comparisons:
            c = result.comparison
            if c.metric not in metric_group:
                continue
            scale = metric_scale(c.metric)
            mean, low, high = oriented(result.difference, c.direction, c.margin)
            label = f"{claim.claim.id}: {comparison_text(c)}" + ("" if result.counted else " (duplicate)"
                                                                 if result.duplicate_of else " (reported)")
            rows.append(ForestRow(label, _scaled(mean, scale), _scaled(low, scale), _scaled(high, scale),
                                  scale * c.delta if c.delta else None, result.verdict))
    return rows


def _scaled(value: Optional[float], scale: float) -> float:
    return math.nan if value is None else scale * value


def side_json(side: SideValues) -> dict[str, Any]:
    return {"protocol": side.side.protocol, "method": side.side.method, "lr_source": side.lr_source,
            "mean": _number(side.stat.mean), "std": _number(side.stat.std), "n": side.stat.n,
            "missing": side.missing, "diverged": list(side.diverged), "values": {str(seed): value for seed, value in sorted(side.values.items())},
            "runs": [str(run.path) for run in side.runs]}


def cpu_capabilities(results: Sequence[ClaimResult]) -> list[str]:
    """The CPU capabilities (``summary.json``'s ``cpu_capability``) of the finished runs the claims read,
    sorted: more than one means the float32 numbers came from CPUs that round differently
    (docs/design.md, "Randomness"); runs finished before the key existed add nothing."""
    found = {str(run.summary["cpu_capability"])
             for result in results for comparison in result.comparisons
             for side in (comparison.method, comparison.baseline) for run in side.runs
             if run.summary and "cpu_capability" in run.summary}
    return sorted(found)


def results_json(results: Sequence[ClaimResult], *, tier: str, out_dir: str) -> dict[str, Any]:
    return {
        "tier": tier,
        "runs": out_dir,
        "rule": rule_text(),
        "confidence": CONFIDENCE,
        "cpu_capabilities": cpu_capabilities(results),
        "claims": [{
            "id": r.claim.id, "paper": r.claim.paper, "source": r.claim.source, "statement": r.claim.statement,
            "paper_protocol": r.claim.paper_protocol, "here": r.claim.here, "quantifier": r.claim.quantifier,
            "verdict": r.verdict, "trend": r.trend, "below_regime": list(r.below_regime),
            "comparisons": [{
                "method": c.comparison.method.text, "baseline": c.comparison.baseline.text,
                "metric": c.comparison.metric, "direction": c.comparison.direction, "margin": c.comparison.margin,
                "delta": c.comparison.delta, "role": c.comparison.role, "target": c.comparison.target,
                "paper": c.comparison.paper, "verdict": c.verdict, "trend": c.trend, "note": c.note,
                "method_side": side_json(c.method), "baseline_side": side_json(c.baseline),
                "difference": {"kind": c.difference.kind, "seeds": list(c.difference.seeds),
                               "values": list(c.difference.differences), "mean": _number(c.difference.mean),
                               "std": _number(c.difference.std), "se": _number(c.difference.se),
                               "df": _number(c.difference.df), "low": _number(c.difference.low),
                               "high": _number(c.difference.high)},
                "counted": c.counted, "duplicate_of": c.duplicate_of,
                "adjusted": None if c.adjusted is None else {
                    "confidence": adjusted_confidence(sum(x.counted for x in r.comparisons)),
                    "low": _number(c.adjusted.low), "high": _number(c.adjusted.high),
                    "contradicted": c.adjusted_contradicted},
            } for c in r.comparisons],
        } for r in results],
    }


def summary_from_json(record: Mapping[str, Any]) -> str:
    """A Markdown claims summary (claim, verdict, primary and reported outcomes) from a ``claims.json``
    record; comparisons without a ``role`` (records older than roles) count as primary, and in the "reported"
    column are the reported comparisons and the duplicates (records older than duplicates have none)."""
    rows = []
    for claim in record["claims"]:
        comparisons = claim.get("comparisons", [])
        def counted(c: Mapping[str, Any]) -> bool:
            return c.get("counted", c.get("role", "primary") == "primary")
        primary = [c.get("trend") or c["verdict"] if c["verdict"] == NOT_TESTED else c["verdict"]
                   for c in comparisons if counted(c)]
        reported = [c["verdict"] for c in comparisons if not counted(c)]
        verdict = claim["verdict"]
        if verdict == NOT_TESTED:
            verdict = f"{NOT_TESTED_TEXT} (trend: {claim.get('trend', '?')})"
        rows.append([claim["id"], f"**{verdict}**", claim.get("quantifier", "all"), tally(primary),
                     tally(reported) if reported else "–"])
    return markdown_table(("claim", "verdict", "quantifier", "primary comparisons", "reported or duplicate"), rows)


def rejudge_table(recorded: dict, rejudged: dict) -> str:
    """Markdown: every claim and comparison with its recorded and its new outcome side by side
    (``fedhet claims rejudge``)."""
    rows = []
    for old, new in zip(recorded["claims"], rejudged["claims"]):
        rows.append([f"**{new['id']}** ({new['quantifier']})", "", "", f"**{old['verdict']}**", f"**{new['verdict']}**"])
        for before, after in zip(old["comparisons"], new["comparisons"]):
            d, scale = after["difference"], metric_scale(after["metric"])
            interval = ("–" if d["low"] is None else
                        f"{scale * d['mean']:+.2f} [{scale * d['low']:+.2f}, {scale * d['high']:+.2f}]")
            adjusted = after.get("adjusted")
            if adjusted and adjusted["low"] is not None:
                interval += f"; adj. [{scale * adjusted['low']:+.2f}, {scale * adjusted['high']:+.2f}]"
            role = ("duplicate" if after.get("duplicate_of") else after["role"])
            rows.append([f"{after['method']} vs {after['baseline']} ({after['metric']})", role, interval,
                         before["verdict"], after["verdict"]])
    return markdown_table(("claim / comparison", "role", "difference [95% CI] (as measured)", "recorded",
                           "current rule"), rows)
