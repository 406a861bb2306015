"""Tiny real sweeps on Synthetic: finished runs are skipped, interrupted ones resumed bit for bit,
configuration conflicts refused, failures reported without stopping the sweep, worker processes."""
from __future__ import annotations

import io
import json

import pytest

from fedhet.engine.callbacks import Callback, read_metrics
from fedhet.lab.sweep.execute import run_sweep
from fedhet.lab.sweep.grid import SweepError, parse_grid
from fedhet.lab.sweep.plan import SWEEP_FILE, SWEEP_RUN_FILE, plan_sweep
from fedhet.lab.sweep.progress import DONE, FAILED, SKIPPED


def _sweep(plan, **kwargs):
    stream = io.StringIO()
    result = run_sweep(plan, stream=stream, live=False, **kwargs)
    return result, stream.getvalue()


def test_second_invocation_runs_nothing_new(tiny_config, tmp_path):
    plan = plan_sweep(tiny_config, grids=[parse_grid("server.learning_rate=0.5,1")], seeds=[1, 2],
                      out_dir=tmp_path / "out")
    result, text = _sweep(plan, jobs=1)
    assert [o.status for o in result.outcomes] == [DONE] * 4
    for outcome in result.outcomes:
        summary = json.loads((outcome.run.run_dir / "summary.json").read_text())
        assert summary["rounds"] == 6 and summary["name"] == outcome.run.name
        assert json.loads((outcome.run.run_dir / SWEEP_RUN_FILE).read_text())["seed"] == outcome.run.seed
    assert "done" in text and "100%" in text
    stamps = {o.run.name: (o.run.run_dir / "summary.json").stat().st_mtime_ns for o in result.outcomes}

    again, text = _sweep(plan_sweep(tiny_config, grids=[parse_grid("server.learning_rate=0.5,1")], seeds=[1, 2],
                                    out_dir=tmp_path / "out"), jobs=1)
    assert [o.status for o in again.outcomes] == [SKIPPED] * 4
    assert not again.ran
    assert {o.run.name: (o.run.run_dir / "summary.json").stat().st_mtime_ns for o in again.outcomes} == stamps
    assert text.count("skipped") >= 4
    manifest = json.loads((tmp_path / "out" / SWEEP_FILE).read_text())
    assert [r["status"] for r in manifest["runs"]] == [SKIPPED] * 4

    # The report of the real runs: one row per learning rate, the seeds' mean and sample std of the
    # final accuracies that the runs' own summaries hold.
    from fedhet.lab.report.build import build_report
    from fedhet.lab.report.runs import collect_runs

    report = build_report(collect_runs([tmp_path / "out"]))
    [section] = report.sections
    assert [row.name for row in section.rows] == ["fedavg (server.learning_rate=0.5)",
                                                  "fedavg (server.learning_rate=1.0)"]
    for row, lr in zip(section.rows, ("0.5", "1")):
        finals = [json.loads((tmp_path / "out" / f"tiny__server.learning_rate={lr}__seed={seed}" / "summary.json")
                             .read_text())["final_accuracy"] for seed in (1, 2)]
        mean = sum(finals) / 2
        assert row.metrics["final_accuracy"].mean == pytest.approx(mean)
        assert row.metrics["final_accuracy"].std == pytest.approx(abs(finals[0] - finals[1]) / 2 ** 0.5)


class _Crash(Callback):
    """Simulates a run killed after its round-4 checkpoint."""

    def on_round_end(self, run, record):
        if record["round"] == 4:
            raise KeyboardInterrupt


def test_interrupted_run_is_resumed_exactly(tiny_config, tmp_path):
    from fedhet.engine.runner import run_experiment

    plan = plan_sweep(tiny_config, out_dir=tmp_path / "out")
    [run] = plan.runs
    with pytest.raises(KeyboardInterrupt):
        run_experiment(run.config, run.run_dir, callbacks=[_Crash()])
    assert not (run.run_dir / "summary.json").exists()
    result, text = _sweep(plan, jobs=1)
    assert result.outcomes[0].status == DONE and "resumed" in text
    reference = plan_sweep(tiny_config, out_dir=tmp_path / "reference").runs[0]
    run_experiment(reference.config, reference.run_dir)
    resumed = [(r["round"], r["test_accuracy"]) for r in read_metrics(run.run_dir / "metrics.jsonl")]
    straight = [(r["round"], r["test_accuracy"]) for r in read_metrics(reference.run_dir / "metrics.jsonl")]
    assert resumed == straight and [r for r, _ in resumed] == [2, 4, 6]


def test_changed_configuration_is_refused_unless_overwrite(tiny_config, tmp_path):
    first = plan_sweep(tiny_config, out_dir=tmp_path / "out")
    _sweep(first, jobs=1)
    changed = plan_sweep(tiny_config, sets=["client.learning_rate=0.2"], out_dir=tmp_path / "out")
    with pytest.raises(SweepError, match="client.learning_rate"):
        _sweep(changed, jobs=1)
    result, _ = _sweep(changed, jobs=1, overwrite=True)
    assert result.outcomes[0].status == DONE
    saved = (changed.runs[0].run_dir / "config.toml").read_text()
    assert "learning_rate = 0.2" in saved


def test_a_failed_run_does_not_stop_the_sweep(tiny_config, tmp_path):
    # A grid value that validates but fails when the run starts: 5 Synthetic devices cannot fill the
    # natural partition's num_clients = 12.
    plan = plan_sweep(tiny_config, grids=[parse_grid("data.num_devices=12,5")], out_dir=tmp_path / "out")
    result, text = _sweep(plan, jobs=1)
    statuses = [o.status for o in result.outcomes]
    assert statuses == [DONE, FAILED]
    failed = result.failed[0]
    assert failed.error and "failed" in text
    assert "Traceback" in (failed.run.run_dir / "sweep.log").read_text()


@pytest.mark.slow
def test_parallel_worker_processes(tiny_config, tmp_path):
    plan = plan_sweep(tiny_config, seeds=[1, 2], out_dir=tmp_path / "out")
    result, text = _sweep(plan, jobs=2, poll_seconds=0.2)
    assert [o.status for o in result.outcomes] == [DONE, DONE]
    # Same numbers as a run in this process.
    from fedhet.engine.runner import run_experiment

    reference = plan_sweep(tiny_config, seeds=[2], out_dir=tmp_path / "reference").runs[0]
    run_experiment(reference.config, reference.run_dir)
    accuracies = [r["test_accuracy"] for r in read_metrics(plan.runs[1].run_dir / "metrics.jsonl")]
    assert accuracies == [r["test_accuracy"] for r in read_metrics(reference.run_dir / "metrics.jsonl")]


def test_eta_kind_groups_runs_by_their_rounds_work_then_method_then_protocol(tmp_path):
    from fedhet.lab.claims.definitions import load_suite
    from fedhet.lab.claims.planning import plan_claims
    from fedhet.lab.commands.claims import default_claims_dir
    from fedhet.lab.sweep.execute import eta_kind

    suite = load_suite(default_claims_dir())
    kinds = {run.name: eta_kind(run) for run in plan_claims(suite, suite.claims, tmp_path, tier="default").runs}
    bernoulli, cyclic = kinds["fedau_bernoulli__fedau__seed=1"], kinds["fedau_cyclic__fedau__seed=1"]
    assert bernoulli[:2] == cyclic[:2] and bernoulli[2:] == ("fedau_bernoulli",) and cyclic[2] == "fedau_cyclic"
    assert kinds["fedau_cyclic__mifa__seed=1"][:2] == (bernoulli[0], "mifa")
    # 3 local epochs of batch 64 with an evaluation every round is not 5 steps of batch 16 every 5th round.
    assert kinds["fedaware_dir01__fedavg__seed=1"][0] != bernoulli[0]
    assert kinds["fedaware_dir01__fedavg__seed=1"] == kinds["fedaware_dir01__fedavg__seed=2"]
