"""Issue 12, finding 6: a sweep's base name and variant names cannot lead outside --out (or the base
file's run.out_dir), and are validated like run.name."""
from __future__ import annotations

import pytest

from fedhet.core.options import ConfigError
from fedhet.lab.commands.sweep import sweep_command
from fedhet.lab.sweep.grid import load_variants
from fedhet.lab.sweep.plan import plan_sweep


def _base_with_name(tiny_config, name):
    text = tiny_config.read_text().replace('name = "tiny"', f"name = {name}", 1)
    tiny_config.write_text(text)
    return tiny_config


@pytest.mark.parametrize("name", ['"../../x"', '"/tmp/abs_sweep_name"', '"a/b"', '".."', '"a\\nb"', '"' + "n" * 150 + '"'])
@pytest.mark.parametrize("with_out", [False, True])
def test_a_base_name_that_is_not_one_component_is_refused(tiny_config, tmp_path, name, with_out):
    base = _base_with_name(tiny_config, name)
    out = tmp_path / "out" if with_out else None
    with pytest.raises(ConfigError) as info:
        plan_sweep(base, out_dir=out)
    assert info.value.key.endswith("run.name")


def test_sweep_command_writes_nothing_outside_out(tiny_config, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "deep" / "er").mkdir(parents=True)
    base = _base_with_name(tiny_config, '"../../escaped"')
    status = sweep_command(str(base), out=str(tmp_path / "deep" / "er" / "out"), dry_run=True)
    assert status == 2 and "run.name" in capsys.readouterr().err
    status = sweep_command(str(base), dry_run=True)     # default out: run.out_dir / base name
    assert status == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep", "tiny.toml"]
    assert not (tmp_path.parent / "escaped").exists()


def test_variant_names_are_one_short_component(tmp_path):
    path = tmp_path / "v.toml"
    path.write_text('["../x"]\nserver.name = "fedavg"\n')
    with pytest.raises(ConfigError, match="variant name"):
        load_variants(path)
    path.write_text(f'[{"v" * 61}]\nserver.name = "fedavg"\n')
    with pytest.raises(ConfigError, match="at most 60 characters"):
        load_variants(path)
    path.write_text(f'[{"v" * 60}]\nserver.name = "fedavg"\n')
    assert load_variants(path)[0].name == "v" * 60
