"""``fedhet sweep --lockstep``: compatible runs trained together in the sweep's process (fedhet.engine.lockstep)."""
from __future__ import annotations

import io
import math

import pytest

from fedhet.engine.callbacks import read_metrics
from fedhet.engine.runner import run_experiment
from fedhet.lab.sweep.execute import lockstep_groups, run_sweep
from fedhet.lab.sweep.grid import SweepError, parse_grid
from fedhet.lab.sweep.options import sweep_options
from fedhet.lab.sweep.plan import plan_sweep
from fedhet.lab.sweep.progress import DONE, FAILED


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
    assert lockstep_groups(todo, sweep_options(None)) == []                         # off by default
    assert lockstep_groups(todo, sweep_options(None, {"lockstep": "auto"})) == []   # auto: a CUDA device only
    groups = lockstep_groups(todo, sweep_options(None, {"lockstep": "on", "lockstep_runs": 2}))
    assert sorted(len(group) for group in groups) == [1, 1, 2, 2]
    for group in groups:
        assert len({run.config.client.name for run, _ in group}) == 1


def test_lockstep_on_refuses_the_ray_executor(tiny_config, tmp_path):
    plan = plan_sweep(tiny_config, out_dir=tmp_path / "out")
    with pytest.raises(SweepError, match="local executor"):
        run_sweep(plan, stream=io.StringIO(), live=False,
                  options=sweep_options(None, {"lockstep": "on", "executor": "ray"}))
