"""The claim-level parts of the verdict rule on hand-made records (fedhet.lab.claims.rejudge, which
fedhet.lab.claims.evaluate.settle shares with the run-based evaluation): duplicates counted once, the
Bonferroni-adjusted intervals of an `all` claim, and a published record judged again."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from fedhet.lab.claims.rejudge import RecordError, rejudge
from fedhet.lab.claims.verdict import CONTRADICTED, HOLDS, NOT_REPRODUCED, SMALLER, adjusted_confidence
from fedhet.lab.report.difference import paired_difference

ROOT = Path(__file__).resolve().parents[3]
SEEDS = (1, 2, 3, 4, 5)


def _side(method: str, values) -> dict:
    return {"method": method, "values": {str(s): v for s, v in zip(SEEDS, values)}, "missing": 0, "lr_source": "x"}


def _comparison(method: str, baseline: str, method_values, baseline_values, *, role="primary", delta=0.01) -> dict:
    return {"method": f"p/{method}", "baseline": f"p/{baseline}", "metric": "last_accuracy", "direction": "greater",
            "margin": 0.0, "delta": delta, "role": role, "target": None, "paper": "",
            "method_side": _side(method, method_values), "baseline_side": _side(baseline, baseline_values),
            "difference": {"kind": "paired"}, "verdict": "?", "note": ""}


def _record(quantifier: str, *comparisons: dict) -> dict:
    return {"tier": "default", "runs": "", "claims": [{"id": "c", "quantifier": quantifier, "verdict": "?",
                                                       "comparisons": list(comparisons)}]}


FEDAVG = (0.7778, 0.7711, 0.7760, 0.7723, 0.7740)
FEDPROX = tuple(v + (0.0001 if i % 2 else -0.0001) for i, v in enumerate(FEDAVG))   # degenerate mu: FedAvg
FEDAVGM = (0.7850, 0.7801, 0.7790, 0.7822, 0.7860)
FEDAWARE = (0.8458, 0.8376, 0.8388, 0.8361, 0.8408)


def test_a_baseline_the_same_in_effect_as_another_is_counted_once():
    (claim,) = rejudge(_record("most", _comparison("fedaware", "fedavg", FEDAWARE, FEDAVG),
                               _comparison("fedaware", "fedavgm", FEDAWARE, FEDAVGM),
                               _comparison("fedaware", "fedprox", FEDAWARE, FEDPROX)))
    first, second, third = claim.comparisons
    assert first.counted and second.counted and not third.counted
    assert third.duplicate_of == "p/fedaware vs p/fedavg" and "counted once" in third.note
    assert third.verdict == HOLDS                       # its own outcome is still shown
    # two counted comparisons: each adjusted interval at 1 - 0.05 / 2
    expected = paired_difference(dict(zip(SEEDS, FEDAWARE)), dict(zip(SEEDS, FEDAVG)), adjusted_confidence(2))
    assert first.adjusted.low == pytest.approx(expected.low) and third.adjusted is None
    assert claim.verdict == HOLDS


def test_paired_arms_whose_both_sides_are_the_same_in_effect_are_duplicates():
    # aware-accuracy's shape: fedprox_aware vs fedprox duplicates fedavg_aware vs fedavg only when both the
    # arms and the baselines are the same in effect
    aware = tuple(v - 0.03 for v in FEDAVG)
    prox_aware = tuple(v - 0.0001 for v in aware)
    other = tuple(v - 0.01 for v in aware)
    (same,) = rejudge(_record("most", _comparison("fedavg_aware", "fedavg", aware, FEDAVG),
                              _comparison("fedprox_aware", "fedprox", prox_aware, FEDPROX)))
    assert [c.counted for c in same.comparisons] == [True, False]
    (different,) = rejudge(_record("most", _comparison("fedavg_aware", "fedavg", aware, FEDAVG),
                                   _comparison("fedprox_aware", "fedprox", other, FEDPROX)))
    assert [c.counted for c in different.comparisons] == [True, True]


def test_reported_comparisons_are_neither_counted_nor_adjusted():
    (claim,) = rejudge(_record("all", _comparison("fedaware", "fedavg", FEDAWARE, FEDAVG),
                               _comparison("fedaware", "fedavgm", FEDAWARE, FEDAVGM, role="reported")))
    primary, reported = claim.comparisons
    assert primary.counted and not reported.counted and reported.adjusted is None
    # one counted comparison: the adjusted interval is the 95% one
    assert primary.adjusted.low == pytest.approx(primary.difference.low)


def test_all_is_contradicted_only_at_the_adjusted_level():
    # four comparisons; the last is below zero at 95% but not at 1 - 0.05 / 4
    base = [0.0] * 5
    clear = [0.05, 0.06, 0.055, 0.052, 0.058]
    weak = [-0.002, -0.009, -0.004, -0.008, -0.002]
    low95 = paired_difference(dict(zip(SEEDS, weak)), dict(zip(SEEDS, base)))
    low_adj = paired_difference(dict(zip(SEEDS, weak)), dict(zip(SEEDS, base)), adjusted_confidence(4))
    assert low95.high < 0 < low_adj.high
    comparisons = [_comparison(f"m{i}", f"b{i}", clear, base) for i in range(3)]
    (claim,) = rejudge(_record("all", *comparisons, _comparison("m3", "b3", weak, base)))
    assert claim.comparisons[3].verdict == CONTRADICTED and not claim.comparisons[3].adjusted_contradicted
    assert claim.verdict == NOT_REPRODUCED
    strong = [v - 0.02 for v in weak]
    (claim,) = rejudge(_record("all", *comparisons, _comparison("m3", "b3", strong, base)))
    assert claim.comparisons[3].adjusted_contradicted and claim.verdict == CONTRADICTED


def test_a_real_effect_below_delta_is_smaller_than_claimed():
    fedspeed = [a + d for a, d in zip(FEDAVG, (0.0050, 0.0060, 0.0045, 0.0055, 0.0055))]
    (claim,) = rejudge(_record("all", _comparison("fedspeed", "fedavg", fedspeed, FEDAVG)))
    assert claim.comparisons[0].verdict == SMALLER and claim.verdict == SMALLER


def test_the_published_2026_11_25_record_under_the_current_rule():
    record = json.loads((ROOT / "docs" / "claims" / "2026-11-25.json").read_text())
    results = {r.claim.id: r for r in rejudge(record)}
    # the intervals are the recorded ones, recomputed from the per-seed values
    for claim in record["claims"]:
        for recorded, result in zip(claim["comparisons"], results[claim["id"]].comparisons):
            if recorded["difference"]["low"] is not None:
                assert result.difference.low == pytest.approx(recorded["difference"]["low"], abs=1e-12)
    assert {i: r.verdict for i, r in results.items()} == {
        "fedaware-dirichlet": "holds", "aware-eludd": "contradicted", "fedaware-hybrid": "not reproduced",
        "fedspeed-dir06": "contradicted", "fedau-participation": "inconclusive", "aware-accuracy": "not reproduced"}
    speed = results["fedspeed-dir06"].comparisons
    assert [c.verdict for c in speed[:2]] == [SMALLER, SMALLER]          # +0.53 and +0.64 points: real, below 1
    assert [c.counted for c in results["fedaware-dirichlet"].comparisons] == [True, True, False, False]
    committed = json.loads((ROOT / "docs" / "claims" / "2026-11-25-rule3.json").read_text())
    assert [c["verdict"] for c in committed["claims"]] == [results[c["id"]].verdict for c in committed["claims"]]


def test_a_record_without_values_is_refused_by_name():
    record = _record("all", _comparison("a", "b", FEDAVG, FEDAVG))
    del record["claims"][0]["comparisons"][0]["method_side"]["values"]
    with pytest.raises(RecordError, match="no per-seed values"):
        rejudge(record)
    with pytest.raises(RecordError, match="no \"claims\" list"):
        rejudge({"tier": "default"})
    assert math.isfinite(adjusted_confidence(3))
