"""Sweep papercuts of issue 24: --quiet is quiet; an algorithm sweep from a preset that sets a
method's own option carries only what each setting's method takes, and says what it left out."""
from __future__ import annotations

import pytest

from fedhet.cli import main
from fedhet.core.options import ConfigError
from fedhet.lab.sweep.plan import plan_sweep
from small_run import small_toml


def _fedaware_base(tmp_path):
    path = tmp_path / "aware.toml"
    text = small_toml(name="aware", rounds=2, eval_every=1).replace('[participation]', '[server]\nname = "fedaware"\n'
                                                                    'alpha = 0.3\nnormalize = true\n\n[participation]')
    path.write_text(text)
    return path


def test_an_algorithm_sweep_carries_only_the_options_each_method_takes(tmp_path, capsys):
    base = _fedaware_base(tmp_path)
    from fedhet.lab.sweep.grid import parse_grid

    plan = plan_sweep(base, grids=[parse_grid("algorithm=fedavg,fedaware")], out_dir=tmp_path / "out")
    configs = {run.assignments[0][1]: run.config for run in plan.runs}
    assert configs["fedaware"].server.options.alpha == 0.3           # FedAWARE keeps its own option
    assert configs["fedavg"].server.name == "fedavg"
    assert [(d.setting, d.keys) for d in plan.dropped] == [("aware__algorithm=fedavg",
                                                             ("server.alpha", "server.normalize"))]
    assert main(["sweep", str(base), "--grid", "algorithm=fedavg,fedaware", "--dry-run",
                 "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert "not carried to the settings whose method does not take them: server.alpha, server.normalize " \
           "(in aware__algorithm=fedavg)" in err


def test_an_option_set_on_purpose_for_a_method_that_lacks_it_is_still_refused(tmp_path):
    from fedhet.lab.sweep.grid import parse_grid

    with pytest.raises(ConfigError, match="server.alpha"):
        plan_sweep(_fedaware_base(tmp_path), grids=[parse_grid("algorithm=fedavg,fedaware")],
                   sets=["server.alpha=0.5"], out_dir=tmp_path / "out")


def test_sweep_quiet_prints_nothing_when_all_goes_well(tiny_config, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["sweep", str(tiny_config), "--seeds", "1,2", "--out", str(out), "--jobs", "1", "--quiet"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""
    assert (out / "tiny__seed=2" / "summary.json").is_file()
