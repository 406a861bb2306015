"""The [sweep] table of a base experiment file and the executor flags (fedhet.lab.sweep.options)."""
from __future__ import annotations

import io
import sys

import pytest

from fedhet.config.schema import load_config
from fedhet.core.options import ConfigError
from fedhet.lab.commands.shared import EXIT_INPUT_ERROR
from fedhet.lab.commands.sweep import sweep_command
from fedhet.lab.sweep.options import SweepOptions, sweep_options
from fedhet.lab.sweep.plan import plan_sweep
from small_run import small_toml

SMALL_TOML = small_toml(name="tiny", rounds=6, eval_every=2, checkpoint_every=2)

SWEEP_TABLE = '\n[sweep]\nexecutor = "ray"\nray_cpus_per_run = 2\nray_transfer = "files"\n'


def test_sweep_table_is_read_by_the_plan_and_ignored_by_a_run(tmp_path):
    path = tmp_path / "base.toml"
    path.write_text(SMALL_TOML + SWEEP_TABLE)
    plan = plan_sweep(path, out_dir=tmp_path / "out")
    assert plan.options == SweepOptions(executor="ray", ray_cpus_per_run=2.0, ray_transfer="files")
    # The table says how to execute, not what runs: the runs' configurations are those without it.
    plain = tmp_path / "plain.toml"
    plain.write_text(SMALL_TOML)
    assert load_config(path) == load_config(plain)
    assert plan.runs[0].config == plan_sweep(plain, out_dir=tmp_path / "out").runs[0].config


def test_flags_override_the_table_and_bad_values_are_config_errors():
    assert sweep_options({"executor": "ray", "ray_address": "auto"}, {"executor": "local", "ray_address": None}) \
        == SweepOptions(executor="local", ray_address="auto")
    with pytest.raises(ConfigError, match=r"sweep\.executor = 'dask': allowed: 'local', 'ray'"):
        sweep_options({"executor": "dask"})
    with pytest.raises(ConfigError, match=r"sweep\.ray_cpus_per_run"):
        sweep_options({}, {"ray_cpus_per_run": 0})
    with pytest.raises(ConfigError, match=r"sweep\.ray_workers"):
        sweep_options({"ray_workers": 2})


def test_bad_sweep_table_is_a_one_line_input_error(tmp_path):
    path = tmp_path / "base.toml"
    path.write_text(SMALL_TOML + '\n[sweep]\nray_transfer = "rsync"\n')
    stderr = io.StringIO()
    assert sweep_command(str(path), out=str(tmp_path / "out"), stderr=stderr) == EXIT_INPUT_ERROR
    assert stderr.getvalue().count("\n") == 1 and "sweep.ray_transfer = 'rsync'" in stderr.getvalue()


def test_ray_executor_without_ray_names_the_extra(tmp_path, monkeypatch, tiny_config):
    monkeypatch.setitem(sys.modules, "ray", None)          # `import ray` raises ImportError
    stderr = io.StringIO()
    status = sweep_command(str(tiny_config), out=str(tmp_path / "out"), executor="ray", stderr=stderr)
    lines = [line for line in stderr.getvalue().splitlines() if line.startswith("fedhet sweep: --executor")]
    assert status == EXIT_INPUT_ERROR
    assert lines == ["fedhet sweep: --executor ray needs the optional package ray: pip install 'fedhet[ray]'"]
    assert not (tmp_path / "out").exists()      # nothing written before the error
