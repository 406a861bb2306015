"""`fedhet claims run` / `report` / `export` end to end on a tiny protocol: runs, resume, numbers, files,
the regime gate (the quick tier gives no verdict), reported comparisons outside the verdict."""
from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
import torch

from fedhet.cli import main
from fedhet.lab.commands.claims import report_command, run_command
from small_run import small_toml

# The sweep tests' tiny setting (tests/lab/sweep/conftest.py, SMALL_TOML): FedAvg on Synthetic(1,1), 12 clients, 6 rounds.
TINY = small_toml(name="tiny", rounds=6, eval_every=2, checkpoint_every=2, backend="sequential")

PROTOCOLS = """
[protocol.tiny]
base = "base/tiny.toml"
title = "Synthetic, 12 clients"
seeds = [1, 2, 3]
quick_seeds = [1, 2]
quick = { "run.rounds" = 4 }
full = { "run.rounds" = 8 }
regime = { "run.rounds" = 6 }

[protocol.tiny.method.fedavg]
lr_source = "untuned: the test's default"
server.name = "fedavg"

[protocol.tiny.method.fedavgm]
lr_source = "paper: nowhere, a test"
server.name = "fedavgm"
server.momentum = 0.5
"""

CLAIM = """
id = "momentum-helps"
paper = "a test"
source = "Table 0"
statement = "FedAvgM beats FedAvg."
paper_protocol = "none"
here = "Synthetic"
metric = "last_accuracy"
direction = "greater"
quantifier = "all"
delta = 0.01

[[comparison]]
method = "tiny/fedavgm"
baseline = "tiny/fedavg"
paper = "1 vs 0"

[[comparison]]
method = "tiny/fedavgm"
baseline = "tiny/fedavg"
metric = "e_ludd"
delta = 0.05
role = "reported"
"""


@pytest.fixture(scope="module")
def claims_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("claims")
    (directory / "base").mkdir()
    (directory / "base" / "tiny.toml").write_text(TINY)
    (directory / "protocols.toml").write_text(PROTOCOLS)
    (directory / "momentum.toml").write_text(CLAIM)
    return directory


def _last_window_accuracy(run_dir: Path, rounds: int) -> float:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    # the last 10% of 6 rounds is round 6 alone (rounds > 6 - ceil(0.6))
    values = [r["test_accuracy"] for r in records if "test_accuracy" in r and r["round"] > rounds - 1]
    return sum(values) / len(values)


@pytest.fixture(scope="module")
def finished(claims_dir, tmp_path_factory):
    """The tiny claim's 6 runs, run once for this module: (out, stdout, stderr, status)."""
    out = tmp_path_factory.mktemp("runs")
    stdout, stderr = io.StringIO(), io.StringIO()
    status = run_command(claims_dir=str(claims_dir), out=str(out), jobs=1, stdout=stdout, stderr=stderr)
    return out, stdout.getvalue(), stderr.getvalue(), status


def test_claims_run_reports_paired_verdicts_and_resumes(claims_dir, finished):
    out, printed, log, status = finished
    assert status == 0, log
    assert "6 ran, 0 already finished, 0 failed" in log
    report = json.loads((out / "report" / "claims.json").read_text())
    # every run ran here, so the record names this machine's capability alone
    assert report["cpu_capabilities"] == [torch.backends.cpu.get_cpu_capability()]
    (claim,) = report["claims"]
    accuracy, e_ludd = claim["comparisons"]
    for seed in (1, 2, 3):
        method_dir = out / "tiny" / f"tiny__fedavgm__seed={seed}"
        baseline_dir = out / "tiny" / f"tiny__fedavg__seed={seed}"
        assert accuracy["method_side"]["values"][str(seed)] == pytest.approx(_last_window_accuracy(method_dir, 6))
        assert accuracy["baseline_side"]["values"][str(seed)] == pytest.approx(_last_window_accuracy(baseline_dir, 6))
        summary = json.loads((method_dir / "summary.json").read_text())
        assert e_ludd["method_side"]["values"][str(seed)] == pytest.approx(summary["e_ludd"])
    differences = [accuracy["method_side"]["values"][s] - accuracy["baseline_side"]["values"][s] for s in ("1", "2", "3")]
    assert accuracy["difference"]["values"] == pytest.approx(differences)
    assert accuracy["difference"]["mean"] == pytest.approx(sum(differences) / 3)
    assert claim["verdict"] in ("holds", "contradicted", "not reproduced", "inconclusive")
    # the verdict is the primary comparison's alone (all of one): the reported e-LUDD row does not enter it
    assert claim["verdict"] == accuracy["verdict"] and e_ludd["role"] == "reported"
    assert claim["below_regime"] == [] and accuracy["difference"]["kind"] == "paired"
    assert accuracy["method_side"]["lr_source"] == "paper: nowhere, a test"
    # terminal table, Markdown and one self-contained HTML page with the claim's curves
    assert "momentum-helps" in printed and "fedavgm > fedavg [tiny]" in printed
    assert max(len(line) for line in printed.splitlines() if not line.startswith(("Markdown:", "JSON:", "HTML:"))) <= 100
    html = (out / "report" / "report.html").read_text()
    assert "<h2>Claims: default tier</h2>" in html and "momentum-helps: " in html and "data:image/png;base64," in html
    assert (out / "report" / "plots" / "claim_momentum-helps_e_lud.png").is_file()
    assert (out / "report" / "plots" / "forest_accuracy.png").is_file()
    assert (out / "report" / "plots" / "forest_e_ludd.png").is_file()
    markdown = (out / "report" / "claims.md").read_text()
    assert "## momentum-helps" in markdown and "forest_accuracy.png" in markdown
    assert "`tiny/fedavgm`: paper: nowhere, a test. Keys: server.name = fedavgm, server.momentum = 0.5" in markdown

    # a second run finds every run finished and reports the same numbers
    again = io.StringIO()
    assert run_command(claims_dir=str(claims_dir), out=str(out), jobs=1, stdout=io.StringIO(), stderr=again) == 0
    assert "0 ran, 6 already finished" in again.getvalue()
    assert json.loads((out / "report" / "claims.json").read_text()) == report


def test_missing_runs_are_inconclusive_and_the_cli_lists_claims(claims_dir, finished, tmp_path, capsys):
    out = tmp_path / "runs"
    shutil.copytree(finished[0], out)
    for seed in (2, 3):      # leave one paired seed: no interval
        (out / "tiny" / f"tiny__fedavg__seed={seed}" / "summary.json").unlink()
    stdout = io.StringIO()
    assert report_command(claims_dir=str(claims_dir), out=str(out), stdout=stdout, stderr=io.StringIO()) == 0
    comparison = json.loads((out / "report" / "claims.json").read_text())["claims"][0]["comparisons"][0]
    assert comparison["verdict"] == "inconclusive" and comparison["baseline_side"]["missing"] == 2
    assert "note 1: 1 paired seed(s): no interval" in stdout.getvalue()

    assert main(["claims", "list", "--claims", str(claims_dir)]) == 0
    assert "1 claims, 6 runs (default tier) over 1 protocols" in capsys.readouterr().out
    assert main(["claims", "run", "--claims", str(claims_dir), "--out", str(out), "--executor", "local",
                 "--dry-run"]) == 0
    assert "finished " in capsys.readouterr().out
    assert main(["claims", "run", "--claims", str(claims_dir), "--only", "nope", "--out", str(out)]) == 2
    assert "--only nope: no such claim; claims: momentum-helps" in capsys.readouterr().err


def test_the_claims_report_refuses_runs_of_edited_definitions(claims_dir, finished, tmp_path):
    """Campaign 2026-11-24 finding W4: the report used runs whose config differs from the definitions."""
    edited = tmp_path / "claims"
    shutil.copytree(claims_dir, edited)
    protocols = edited / "protocols.toml"
    protocols.write_text(protocols.read_text().replace('server.momentum = 0.5', 'server.momentum = 0.9'))
    out = tmp_path / "runs"
    shutil.copytree(finished[0], out)
    stderr = io.StringIO()
    assert report_command(claims_dir=str(edited), out=str(out), stdout=io.StringIO(), stderr=stderr) == 0
    comparison = json.loads((out / "report" / "claims.json").read_text())["claims"][0]["comparisons"][0]
    assert comparison["method_side"]["missing"] == 3 and comparison["verdict"] == "inconclusive"
    assert comparison["baseline_side"]["missing"] == 0
    assert stderr.getvalue().count("made with other definitions") == 3 and "server.momentum" in stderr.getvalue()


@pytest.mark.parametrize("damage", ["torn", "deleted_last_line"])
def test_a_damaged_finished_run_is_left_out_of_the_report(claims_dir, finished, tmp_path, damage):
    """Campaign 2026-11-24 finding W5: a finished run's torn or shortened metrics.jsonl moved a verdict."""
    out = tmp_path / "runs"
    shutil.copytree(finished[0], out)
    metrics = out / "tiny" / "tiny__fedavg__seed=1" / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    metrics.write_text("".join(lines[:-1]) + (lines[-1][: len(lines[-1]) // 2] + "\n" if damage == "torn" else ""))
    stderr = io.StringIO()
    assert report_command(claims_dir=str(claims_dir), out=str(out), stdout=io.StringIO(), stderr=stderr) == 0
    comparison = json.loads((out / "report" / "claims.json").read_text())["claims"][0]["comparisons"][0]
    assert comparison["baseline_side"]["missing"] == 1 and "1" not in comparison["baseline_side"]["values"]
    assert "tiny__fedavg__seed=1 as damaged" in stderr.getvalue()


def test_the_quick_tier_gives_no_verdict(claims_dir, tmp_path):
    out = tmp_path / "quick"
    stdout, stderr = io.StringIO(), io.StringIO()
    assert run_command(claims_dir=str(claims_dir), tier="quick", out=str(out), jobs=1, stdout=stdout,
                       stderr=stderr) == 0, stderr.getvalue()
    assert "4 ran" in stderr.getvalue() and not (out / "tiny" / "tiny__fedavg__seed=3").exists()
    (claim,) = json.loads((out / "report" / "claims.json").read_text())["claims"]
    assert claim["verdict"] == "not tested" and claim["trend"] in ("holds", "contradicted", "not reproduced",
                                                                    "inconclusive")
    assert all(c["verdict"] == "not tested" and c["trend"] for c in claim["comparisons"])
    assert claim["below_regime"] and "quick tier" in claim["below_regime"][0]
    assert "momentum-helps: not tested at this scale (trend: " in stdout.getvalue()
    assert json.loads((out / "report" / "claims.json").read_text())["tier"] == "quick"


def test_export_writes_each_planned_config_and_runs_nothing(claims_dir, tmp_path, capsys):
    from fedhet.config.schema import load_config

    out = tmp_path / "export"
    assert main(["claims", "export", "--claims", str(claims_dir), "--tier", "full", "--out", str(out)]) == 0
    assert "6 run configurations of 1 claims" in capsys.readouterr().out
    written = sorted(path.relative_to(out).as_posix() for path in out.rglob("*")
                     if path.is_file() and path.name != ".fedhet.lock")     # export holds --out's lock
    assert written == sorted(f"tiny/tiny__{m}__seed={s}/config.toml" for m in ("fedavg", "fedavgm") for s in (1, 2, 3))
    config = load_config(out / "tiny" / "tiny__fedavgm__seed=2" / "config.toml")
    assert config.run.rounds == 8 and config.run.seed == 2 and config.server.name == "fedavgm"
    assert config.run.name == "tiny__fedavgm__seed=2"
    with pytest.raises(SystemExit) as stopped:       # argparse: --full is --tier full, not both
        main(["claims", "export", "--claims", str(claims_dir), "--full", "--tier", "quick", "--out", str(out)])
    assert stopped.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_unpaired_protocols_get_a_welch_interval(claims_dir, finished, tmp_path):
    """A claim comparing two protocols whose participation differs reads them unpaired (Welch)."""
    from fedhet.lab.claims.definitions import load_suite
    from fedhet.lab.claims.evaluate import evaluate_claims

    directory = tmp_path / "claims"
    shutil.copytree(claims_dir, directory)
    other = PROTOCOLS.replace("[protocol.tiny", "[protocol.other").replace('"Synthetic, 12 clients"', '"other"')
    other = other.replace('base = "base/tiny.toml"', 'base = "base/tiny.toml"\nset = { "participation.clients_per_round" = 5 }')
    (directory / "protocols.toml").write_text(PROTOCOLS + other)
    (directory / "momentum.toml").write_text(CLAIM.replace('baseline = "tiny/fedavg"\npaper',
                                                           'baseline = "other/fedavg"\npaper'))
    suite = load_suite(directory)
    out = tmp_path / "runs"
    shutil.copytree(finished[0] / "tiny", out / "tiny")
    shutil.copytree(finished[0] / "tiny", out / "other")
    for run in (out / "other").iterdir():
        run.rename(run.with_name(run.name.replace("tiny__", "other__")))
    (result,) = evaluate_claims(suite, suite.claims, out)
    accuracy, e_ludd = result.comparisons
    assert accuracy.difference.kind == "welch" and e_ludd.difference.kind == "paired"


def test_a_method_with_pending_tuning_gets_no_verdict(claims_dir, finished, tmp_path):
    """Hyperparameters still awaiting the pre-registered tuning (lr_source "pending: ...") are the papers'
    defaults, the untuned comparison the audit rejected: the claim is not tested, with that reason, and
    its trend is still shown."""
    from fedhet.lab.claims.definitions import load_suite
    from fedhet.lab.claims.evaluate import evaluate_claims
    from fedhet.lab.claims.planning import PENDING_GAP
    from fedhet.lab.claims.render import claim_verdict_text

    directory = tmp_path / "claims"
    shutil.copytree(claims_dir, directory)
    protocols = directory / "protocols.toml"
    protocols.write_text(protocols.read_text().replace('lr_source = "paper: nowhere, a test"',
                                                       'lr_source = "pending: tune_claims.sh (a test)"'))
    suite = load_suite(directory)
    (tested,) = evaluate_claims(load_suite(claims_dir), load_suite(claims_dir).claims, finished[0])
    (pending,) = evaluate_claims(suite, suite.claims, finished[0])
    assert tested.tested and not pending.tested
    assert any(PENDING_GAP in reason and "tiny/fedavgm" in reason for reason in pending.below_regime)
    assert not any("tiny/fedavg)" in reason for reason in pending.below_regime)
    assert claim_verdict_text(pending) == f"not tested: tuning pending (trend: {tested.verdict})"


def test_backend_flag_sets_every_runs_backend(claims_dir, finished, tmp_path):
    out = tmp_path / "runs"
    stderr = io.StringIO()
    assert run_command(claims_dir=str(claims_dir), out=str(out), jobs=1, backend="vectorized", report=False,
                       stdout=io.StringIO(), stderr=stderr) == 0, stderr.getvalue()
    for seed in (1, 2, 3):
        for method in ("fedavg", "fedavgm"):
            run_dir = out / "tiny" / f"tiny__{method}__seed={seed}"
            assert 'backend = "vectorized"' in (run_dir / "config.toml").read_text()
            assert json.loads((run_dir / "summary.json").read_text())["backend"] == "vectorized"
            # the same numbers as the sequential runs, to rounding
            sequential = finished[0] / "tiny" / run_dir.name
            assert _last_window_accuracy(run_dir, 6) == pytest.approx(_last_window_accuracy(sequential, 6), abs=0.02)
    # runs finished with another backend are a different configuration: listed, not silently mixed
    listing = io.StringIO()
    assert run_command(claims_dir=str(claims_dir), out=str(finished[0]), jobs=1, backend="vectorized",
                       dry_run=True, stdout=listing, stderr=io.StringIO()) in (0, 2)
    assert "differs from the sweep's in run.backend" in listing.getvalue()


def test_a_diverged_run_enters_with_the_failure_value_and_is_flagged(claims_dir, finished, tmp_path):
    """A planned run that stopped on a diverged round counts as the claim's failure_value (chance accuracy)
    instead of being dropped; without a failure_value it is missing; a run killed (no marker) is missing."""
    from fedhet.lab.claims.definitions import load_suite
    from fedhet.lab.claims.evaluate import evaluate_claims

    out = tmp_path / "runs"
    shutil.copytree(finished[0] / "tiny", out / "tiny")
    run_dir = out / "tiny" / "tiny__fedavgm__seed=2"
    (run_dir / "summary.json").unlink()                     # unfinished...
    (run_dir / "diverged.json").write_text('{"round": 3, "reason": "a test"}')   # ...because it diverged
    killed = out / "tiny" / "tiny__fedavg__seed=3"
    (killed / "summary.json").unlink()                      # unfinished, no marker: killed

    (plain,) = evaluate_claims(load_suite(claims_dir), load_suite(claims_dir).claims, out)
    assert 2 not in plain.comparisons[0].method.values and plain.comparisons[0].method.missing == 1

    directory = tmp_path / "claims"
    shutil.copytree(claims_dir, directory)
    claim = directory / "momentum.toml"
    claim.write_text(claim.read_text().replace('delta = 0.01\n', 'delta = 0.01\nfailure_value = 0.1\n', 1))
    suite = load_suite(directory)
    (result,) = evaluate_claims(suite, suite.claims, out)
    accuracy, e_ludd = result.comparisons
    assert accuracy.method.values[2] == 0.1 and accuracy.method.diverged == (2,)
    assert "fedavgm seed 2 diverged: counted as 10%" in accuracy.note
    assert 3 not in accuracy.baseline.values                 # killed, not diverged: still missing
    assert 2 not in e_ludd.method.values                     # the failure value is an accuracy

    claim.write_text(claim.read_text().replace("failure_value = 0.1", "failure_value = 10"))
    from fedhet.lab.claims.definitions import ClaimsError
    with pytest.raises(ClaimsError, match=r"failure_value = 10: an accuracy in \[0, 1\]"):
        load_suite(directory)


def test_the_headroom_gate(claims_dir, finished, tmp_path, monkeypatch):
    """No verdict when the best baseline ends within delta of the IID reference; a verdict otherwise."""
    from fedhet.lab.claims import evaluate
    from fedhet.lab.claims.definitions import ClaimsError, load_suite
    from fedhet.lab.claims.render import claim_verdict_text

    directory = tmp_path / "claims"
    shutil.copytree(claims_dir, directory)
    iid = PROTOCOLS.replace("[protocol.tiny", "[protocol.iid").replace('"Synthetic, 12 clients"', '"iid"')
    iid = iid.replace('base = "base/tiny.toml"', 'base = "base/tiny.toml"\nset = { "partition.name" = "iid" }')
    (directory / "protocols.toml").write_text(PROTOCOLS + iid)
    gate = ('\n[headroom]\nreference = "iid/fedavg"\nbaselines = ["tiny/fedavg"]\nmetric = "last_accuracy"\n'
            'delta = 0.01\n\n[[comparison]]\nmethod = "tiny/fedavgm"\nbaseline = "iid/fedavg"\nrole = "reported"\n')
    claim = directory / "momentum.toml"
    claim.write_text(CLAIM.replace('delta = 0.01\n', 'delta = 0.01\n' + gate.split("\n\n[[comparison]]")[0] + "\n", 1)
                     + "\n[[comparison]]" + gate.split("[[comparison]]")[1])
    suite = load_suite(directory)
    out = tmp_path / "runs"
    shutil.copytree(finished[0] / "tiny", out / "tiny")
    means = {}
    real_side_values = evaluate.side_values

    def side_values(suite, index, side, comparison, *, tier, failure_value=None):
        result = real_side_values(suite, index, side, comparison, tier=tier, failure_value=failure_value)
        if side.text in means:
            result = evaluate.SideValues(side, (), {1: means[side.text], 2: means[side.text]},
                                         evaluate.describe([means[side.text]] * 2), 0, "x")
        return result

    monkeypatch.setattr(evaluate, "side_values", side_values)
    means.update({"iid/fedavg": 0.80, "tiny/fedavg": 0.795})           # within 1 point: no headroom
    (result,) = evaluate.evaluate_claims(suite, suite.claims, out)
    assert not result.tested and result.verdict == "not tested"
    assert claim_verdict_text(result).startswith("not tested: no headroom at this scale (trend: ")
    assert any("tiny/fedavg ends at 79.50%, within 1 points of the IID reference iid/fedavg at 80.00%" in r
               for r in result.below_regime)
    means.update({"iid/fedavg": 0.80, "tiny/fedavg": 0.785})           # 1.5 points below: room to show a gain
    (result,) = evaluate.evaluate_claims(suite, suite.claims, out)
    assert result.tested

    claim.write_text(claim.read_text().replace('baselines = ["tiny/fedavg"]', 'baselines = ["tiny/nosuch"]'))
    with pytest.raises(ClaimsError, match="headroom"):
        load_suite(directory)
