"""``fedhet sweep --lockstep``: compatible runs trained together in the sweep's process (fedhet.engine.lockstep)."""
from __future__ import annotations

import io
import math

import pytest

from fedhet.client.base import LocalSolver
from fedhet.config import ConfigError
from fedhet.engine.callbacks import read_metrics
from fedhet.engine.runner import run_experiment
from fedhet.lab.sweep.execute import NO_PARTNER, lockstep_plan, run_sweep
from fedhet.lab.sweep.grid import SweepError, parse_grid
from fedhet.lab.sweep.options import sweep_options
from fedhet.lab.sweep.plan import plan_sweep
from fedhet.lab.sweep.progress import DONE, FAILED
from small_run import skip_run_plots


def _values(run_dir):
    return [{k: v for k, v in r.items() if k != "wall_seconds"} for r in read_metrics(run_dir / "metrics.jsonl")]


def test_a_lockstep_sweep_gives_each_run_its_numbers_alone(tiny_config, tmp_path):
    plan = plan_sweep(tiny_config, grids=[parse_grid("client.learning_rate=0.02,0.1,1e30")], seeds=[1, 2],
                      sets=["run.dtype=float64"], out_dir=tmp_path / "out")
    result = run_sweep(plan, stream=io.StringIO(), live=False, options=sweep_options(None, {"lockstep": "on"}))
    statuses = {o.run.name: o.status for o in result.outcomes}
    diverged = [name for name in statuses if "1e+30" in name or "1e30" in name]
    assert len(diverged) == 2 and all(statuses[name] == FAILED for name in diverged)
    assert all(status == DONE for name, status in statuses.items() if name not in diverged)
    for outcome in result.outcomes:
        if outcome.status != DONE:
            assert "diverged" in (outcome.error or "")
            continue
        assert outcome.summary is not None and outcome.summary["backend"] == "lockstep"
        alone = tmp_path / "alone" / outcome.run.name
        run_experiment(outcome.run.config.with_overrides({"run.backend": "sequential"}), alone)
        mine, theirs = _values(outcome.run.run_dir), _values(alone)
        assert len(mine) == len(theirs) == 3
        for record, reference in zip(mine, theirs):
            for key, value in reference.items():
                if isinstance(value, float) and math.isfinite(value):
                    assert record[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
                else:
                    assert record[key] == value, key
        assert "backend: lockstep" in (outcome.run.run_dir / "sweep.log").read_text()


def test_lockstep_groups_by_model_and_solver_and_caps_their_size(tiny_config, tmp_path):
    plan = plan_sweep(tiny_config, grids=[parse_grid("client.name=sgd,fedprox")], seeds=[1, 2, 3],
                      out_dir=tmp_path / "out")
    todo = [(run, "new") for run in plan.runs]
    assert lockstep_plan(todo, sweep_options(None, {"lockstep": "off"}))[0] == []
    assert lockstep_plan(todo, sweep_options(None))[0] == []                         # auto by default
    assert lockstep_plan(todo, sweep_options(None, {"lockstep": "auto"}))[0] == []   # auto: a CUDA device only
    groups = lockstep_plan(todo, sweep_options(None, {"lockstep": "on", "lockstep_runs": 2}))[0]
    assert sorted(len(group) for group in groups) == [1, 1, 2, 2]
    for group in groups:
        assert len({run.config.client.name for run, _ in group}) == 1


def test_lockstep_on_refuses_the_ray_executor(tiny_config, tmp_path):
    plan = plan_sweep(tiny_config, out_dir=tmp_path / "out")
    with pytest.raises(SweepError, match="local executor"):
        run_sweep(plan, stream=io.StringIO(), live=False,
                  options=sweep_options(None, {"lockstep": "on", "executor": "ray"}))
    with pytest.raises(SweepError, match="local executor"):          # the Python API's lockstep= argument
        run_sweep(plan, stream=io.StringIO(), live=False, options=sweep_options(None, {"executor": "ray"}),
                  lockstep="on")
    with pytest.raises(ConfigError, match="'off', 'on', 'auto'"):
        run_sweep(plan, stream=io.StringIO(), live=False, lockstep="maybe")
    assert not (tmp_path / "out").exists()


def test_a_larger_set_splits_into_even_groups(tiny_config, tmp_path):
    plan = plan_sweep(tiny_config, seeds=[1, 2, 3, 4, 5], out_dir=tmp_path / "out")
    todo = [(run, "new") for run in plan.runs]
    groups = lockstep_plan(todo, sweep_options(None, {"lockstep": "on", "lockstep_runs": 4}))[0]
    assert [len(group) for group in groups] == [3, 2]          # not 4 and a group of one
    assert [run for group in groups for run, _ in group] == list(plan.runs)


def _same_records(mine, theirs, tolerance):
    assert len(mine) == len(theirs) > 0
    for record, reference in zip(mine, theirs):
        assert record.keys() == reference.keys()
        for key, value in reference.items():
            if isinstance(value, float) and math.isfinite(value):
                assert record[key] == pytest.approx(value, rel=tolerance, abs=tolerance), key
            else:
                assert record[key] == value, key


def test_a_run_with_no_partner_trains_alone_and_says_why_once(tiny_config, tmp_path, monkeypatch):
    skip_run_plots(monkeypatch)
    # FedAvg's and FedProx's local solvers differ: on --lockstep on, each run has no other run to train
    # with, so each runs as it would alone (bit for bit) and one line says why.
    plan = plan_sweep(tiny_config, grids=[parse_grid("client.name=sgd,fedprox")], seeds=[1], out_dir=tmp_path / "out")
    assert lockstep_plan([(run, "new") for run in plan.runs], sweep_options(None, {"lockstep": "on"}))[0] == []
    notes: list[str] = []
    result = run_sweep(plan, jobs=1, stream=io.StringIO(), live=False,
                       options=sweep_options(None, {"lockstep": "on"}), notes=notes.append)
    assert sorted(notes) == sorted(f"{run.name}: {NO_PARTNER}" for run in plan.runs)
    for outcome in result.outcomes:
        assert outcome.status == DONE and outcome.summary is not None and outcome.summary["backend"] != "lockstep"
        assert (outcome.run.run_dir / "sweep.log").read_text().count(NO_PARTNER) == 1
        alone = tmp_path / "alone" / outcome.run.name
        run_experiment(outcome.run.config, alone)
        _same_records(_values(outcome.run.run_dir), _values(alone), tolerance=0)
    # A sweep with one run has no one to pair it with: nothing to say.
    single = plan_sweep(tiny_config, seeds=[1], out_dir=tmp_path / "single")
    assert lockstep_plan([(run, "new") for run in single.runs], sweep_options(None, {"lockstep": "on"})) == ([], [])


def test_a_solver_the_vectorised_backend_refuses_trains_alone_and_the_sweep_says_why(tiny_config, tmp_path,
                                                                                      monkeypatch):
    # Every solver opts out of vectorisation (as one whose rule is not row-wise does): the two runs of the
    # group train alone on the sequential backend, bit for bit their numbers alone, and each says why in
    # one line, in its sweep.log and among the sweep's notes.
    monkeypatch.setattr(LocalSolver, "vectorizable", False)
    skip_run_plots(monkeypatch)
    plan = plan_sweep(tiny_config, seeds=[1, 2], sets=["run.dtype=float64", "run.backend=sequential"],
                      out_dir=tmp_path / "out")
    notes: list[str] = []
    result = run_sweep(plan, jobs=1, stream=io.StringIO(), live=False,
                       options=sweep_options(None, {"lockstep": "on"}), notes=notes.append)
    assert len(notes) == 2
    for outcome in result.outcomes:
        (note,) = [line for line in notes if line.startswith(outcome.run.name + ": ")]
        assert "trains alone on the sequential backend" in note and "not vectorizable" in note
        log = (outcome.run.run_dir / "sweep.log").read_text()
        assert log.count("trains alone") == 1 and "backend: lockstep" in log
        alone = tmp_path / "alone" / outcome.run.name
        run_experiment(outcome.run.config, alone)
        _same_records(_values(outcome.run.run_dir), _values(alone), tolerance=0)


def test_a_note_is_a_line_of_its_own_in_both_progress_modes():
    from fedhet.lab.sweep.progress import RUNNING, SweepProgress

    for live in (False, True):
        stream = io.StringIO()
        view = SweepProgress([("a", 4), ("b", 4)], stream, live=live)
        view.update("a", RUNNING)
        view.message("a: lockstep: this run trains alone: why")
        view.update("b", RUNNING)
        text = stream.getvalue()
        assert text.count("a: lockstep: this run trains alone: why\n") == 1
        if live:
            # The block (two run lines and the summary) was taken away before the note and drawn again after it.
            before, after = text.split("a: lockstep: this run trains alone: why\n")
            assert before.endswith("\x1b[3F\x1b[J") and "sweep |" in after and after.count("\x1b[2K") >= 3
