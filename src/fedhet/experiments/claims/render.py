"""The claims table as text: cells shared by the terminal, Markdown and HTML, and the JSON record.

Accuracies are shown in percent (two decimals) and their differences in points; e-LUDD with two
decimals (three for differences); rounds to target with one. Each side is ``mean ± sample std`` over
its seeds; the difference is the paired mean with its 95% Student-t interval ``[low, high]``.
"""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence

from fedhet.experiments.claims.definitions import Comparison
from fedhet.experiments.claims.evaluate import ClaimResult, ComparisonResult, SideValues
from fedhet.experiments.claims.verdict import CONFIDENCE

ACCURACY_METRICS = ("last_accuracy", "best_accuracy")
METRIC_NAMES = {"last_accuracy": "last-10% acc. (%)", "best_accuracy": "best acc. (%)", "e_ludd": "e-LUDD",
                "rounds_to_target": "rounds to target"}
DIRECTION_TEXT = {"greater": ">", "less": "<", "not_worse": "not worse than"}
SUMMARY_COLUMNS = ("claim", "verdict", "comparisons", "paper", "statement")
COLUMNS = ("claim", "comparison", "metric", "verdict", "difference [95% CI]", "method (mean ± std)",
           "baseline (mean ± std)", "seeds", "paper's numbers", "lr source")
SUMMARY_VERDICT, COMPARISON_VERDICT = 1, 3           # the verdict's column in each table


def _scale(metric: str) -> float:
    return 100.0 if metric in ACCURACY_METRICS else 1.0


def _digits(metric: str, difference: bool = False) -> int:
    if metric == "rounds_to_target":
        return 1
    if metric == "e_ludd":
        return 3 if difference else 2
    return 2


def value_text(metric: str, mean: Optional[float], std: Optional[float]) -> str:
    if mean is None:
        return "–"
    scale, digits = _scale(metric), _digits(metric)
    text = f"{scale * mean:.{digits}f}"
    return text if std is None else f"{text} ± {scale * std:.{digits}f}"


def difference_text(result: ComparisonResult) -> str:
    d, metric = result.difference, result.comparison.metric
    if d.mean is None:
        return "–"
    scale, digits = _scale(metric), _digits(metric, difference=True)
    text = f"{scale * d.mean:+.{digits}f}"
    if d.low is None or d.high is None:
        return text
    return f"{text} [{scale * d.low:+.{digits}f}, {scale * d.high:+.{digits}f}]"


def side_text(side: SideValues, metric: str) -> str:
    text = value_text(metric, side.stat.mean, side.stat.std)
    return f"{text} ({side.missing} missing)" if side.missing else text


def comparison_text(comparison: Comparison) -> str:
    """``fedaware > fedavg [fedaware_dir01]``, or with both protocols when they differ."""
    m, b, relation = comparison.method, comparison.baseline, DIRECTION_TEXT[comparison.direction]
    if comparison.direction == "not_worse":
        scale = _scale(comparison.metric)
        unit = " pt" if comparison.metric in ACCURACY_METRICS else ""
        relation = f"not worse (margin {scale * comparison.margin:g}{unit}) than"
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
    return f"{result.verdict} ({result.note})" if result.note else result.verdict


def comparison_cells(claim: ClaimResult, result: ComparisonResult) -> list[str]:
    c = result.comparison
    return [claim.claim.id, comparison_text(c), METRIC_NAMES[c.metric], verdict_text(result),
            difference_text(result), side_text(result.method, c.metric), side_text(result.baseline, c.metric),
            str(result.difference.n), c.paper or "–", lr_text(result)]


def summary_cells(claim: ClaimResult) -> list[str]:
    counts: dict[str, int] = {}
    for result in claim.comparisons:
        counts[result.verdict] = counts.get(result.verdict, 0) + 1
    tally = ", ".join(f"{n} {v}" for v, n in counts.items())
    return [claim.claim.id, claim.verdict, tally, f"{claim.claim.paper}, {claim.claim.source}",
            claim.claim.statement]


def rule_text() -> str:
    return (f"Difference = method - baseline, paired by seed; mean and two-sided {100 * CONFIDENCE:g}% Student-t "
            "interval over the seeds. '>' holds when the interval's lower end is above 0 and is not reproduced when "
            "the mean is <= 0; '<' mirrors it; 'not worse (margin m)' uses -m in place of 0; otherwise, and with "
            "fewer than 2 seeds, inconclusive. A claim holds when all its comparisons hold and is not reproduced "
            "when any is. Accuracies in %, differences in points. Rule: docs/claims.md.")


def _aligned(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def console_table(results: Sequence[ClaimResult]) -> str:
    """The claims for a terminal: the verdict per claim, then every comparison."""
    summary = [["claim", "verdict", "comparisons", "paper"]]
    summary += [summary_cells(r)[:4] for r in results]
    detail = [[title for title in COLUMNS if title != "metric"]]
    for claim in results:
        for result in claim.comparisons:
            cells = comparison_cells(claim, result)
            cells[1] = f"{cells[1]}: {cells[2]}"
            detail.append(cells[:2] + cells[3:])
    return "\n".join(["fedhet claims", "", _aligned(summary), "", _aligned(detail), "", rule_text()])


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_md(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _number(value: Optional[float]) -> Optional[float]:
    return value if value is not None and math.isfinite(value) else None


def side_json(side: SideValues) -> dict[str, Any]:
    return {"protocol": side.side.protocol, "method": side.side.method, "lr_source": side.lr_source,
            "mean": _number(side.stat.mean), "std": _number(side.stat.std), "n": side.stat.n,
            "missing": side.missing, "values": {str(seed): value for seed, value in sorted(side.values.items())},
            "runs": [str(run.path) for run in side.runs]}


def results_json(results: Sequence[ClaimResult], *, full: bool, out_dir: str) -> dict[str, Any]:
    return {
        "mode": "full" if full else "cpu",
        "runs": out_dir,
        "rule": rule_text(),
        "confidence": CONFIDENCE,
        "claims": [{
            "id": r.claim.id, "paper": r.claim.paper, "source": r.claim.source, "statement": r.claim.statement,
            "paper_protocol": r.claim.paper_protocol, "here": r.claim.here, "verdict": r.verdict,
            "comparisons": [{
                "method": c.comparison.method.text, "baseline": c.comparison.baseline.text,
                "metric": c.comparison.metric, "direction": c.comparison.direction, "margin": c.comparison.margin,
                "paper": c.comparison.paper, "verdict": c.verdict, "note": c.note,
                "method_side": side_json(c.method), "baseline_side": side_json(c.baseline),
                "difference": {"seeds": list(c.difference.seeds), "values": list(c.difference.differences),
                               "mean": _number(c.difference.mean), "std": _number(c.difference.std),
                               "low": _number(c.difference.low), "high": _number(c.difference.high)},
            } for c in r.comparisons],
        } for r in results],
    }
