"""``fedhet claims run --lockstep``: the claims' runs trained in lockstep give every run's numbers alone (float64,
1e-9) and the same verdicts; wrong values and the Ray executor are refused in one line."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from test_claims_run import CLAIM, PROTOCOLS

from fedhet.cli import main
from fedhet.lab.claims.definitions import load_suite
from fedhet.lab.claims.evaluate import evaluate_claims
from fedhet.lab.claims.render import results_json
from small_run import skip_run_plots, small_toml

# The claims run tests' protocol (two methods: the same local solver, another server step) in float64, two seeds.
TINY64 = small_toml(name="tiny", rounds=6, eval_every=2, checkpoint_every=2, backend="sequential", dtype="float64")


@pytest.fixture
def claims64(tmp_path) -> Path:
    directory = tmp_path / "claims"
    (directory / "base").mkdir(parents=True)
    (directory / "base" / "tiny.toml").write_text(TINY64)
    (directory / "protocols.toml").write_text(PROTOCOLS.replace("seeds = [1, 2, 3]", "seeds = [1, 2]"))
    (directory / "momentum.toml").write_text(CLAIM)
    return directory


def _records(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k != "wall_seconds"} for line in lines]


def _verdicts(claims_dir: Path, out: Path) -> tuple[list, list]:
    """Each claim's and comparison's verdict, and each comparison's per-seed differences, as the report's
    claims.json holds them (the report itself, with its figures, is not drawn)."""
    suite = load_suite(claims_dir)
    record = results_json(evaluate_claims(suite, suite.claims, out), tier="default", out_dir=str(out))
    verdicts = [(claim["id"], claim["verdict"], [c["verdict"] for c in claim["comparisons"]])
                for claim in record["claims"]]
    return verdicts, [value for claim in record["claims"] for c in claim["comparisons"]
                      for value in c["difference"]["values"]]


@pytest.mark.slow
def test_claims_in_lockstep_give_each_run_its_numbers_alone_and_the_same_verdicts(claims64, tmp_path, monkeypatch,
                                                                                    capsys):
    skip_run_plots(monkeypatch)
    alone, together = tmp_path / "alone", tmp_path / "together"
    for out, lockstep in ((alone, "off"), (together, "on")):
        assert main(["claims", "run", "--claims", str(claims64), "--out", str(out), "--jobs", "1",
                     "--lockstep", lockstep, "--no-report"]) == 0
    runs = sorted(path.parent.relative_to(alone) for path in alone.glob("*/*/summary.json"))
    assert len(runs) == 4                                  # 2 methods x 2 seeds
    for run in runs:
        assert json.loads((together / run / "summary.json").read_text())["backend"] == "lockstep"
        assert json.loads((alone / run / "summary.json").read_text())["backend"] == "sequential"
        mine, theirs = _records(together / run), _records(alone / run)
        assert len(mine) == len(theirs) == 3             # rounds 2, 4, 6 evaluated
        for record, reference in zip(mine, theirs):
            assert record.keys() == reference.keys()
            for key, value in reference.items():
                if isinstance(value, float) and math.isfinite(value):
                    assert record[key] == pytest.approx(value, rel=1e-9, abs=1e-12), (run, key)
                else:
                    assert record[key] == value, (run, key)
    (verdicts, differences), (verdicts_together, differences_together) = _verdicts(claims64, alone), \
        _verdicts(claims64, together)
    assert verdicts == verdicts_together and verdicts[0][1] != "not tested"
    assert differences_together == pytest.approx(differences, rel=1e-9, abs=1e-12) and len(differences) == 4


def test_claims_run_refuses_a_wrong_lockstep_value_and_lockstep_on_ray(claims64, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["claims", "run", "--claims", str(claims64), "--out", str(out), "--lockstep", "maybe"]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "'maybe'" in error and "'off', 'on', 'auto'" in error
    assert main(["claims", "run", "--claims", str(claims64), "--out", str(out), "--executor", "ray",
                 "--lockstep", "on"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "lockstep" in error and "local executor" in error
    assert not list(out.glob("*/*/metrics.jsonl"))
