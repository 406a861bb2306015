"""Issue 12, finding 11 (and the run.name half of 6): names that become paths, and config.toml
for any string."""
import tomllib

import pytest

from fedhet.config.schema import config_to_toml, load_config
from fedhet.core.options import ConfigError
from fedhet.names import MAX_NAME_LENGTH, child_path, name_problem


@pytest.mark.parametrize("name", ["a\nb", "a\x00b", "tab\there", "x" * 300, "é" * 150, "../x", "/abs", "a\\b",
                                  "..", ".", "", "-rf"])
def test_bad_run_names_are_config_errors(name):
    with pytest.raises(ConfigError) as info:
        load_config(None, {"run.name": name})
    assert info.value.key == "run.name"
    assert "\n" not in str(info.value)          # the message itself stays one line (repr of the name)


@pytest.mark.parametrize("name", ["run", "fmnist__fedavg__server.learning_rate=0.1__seed=2", "lr=1..2",
                                  "x" * MAX_NAME_LENGTH, "ünïcode"])
def test_good_run_names_pass(name):
    assert load_config(None, {"run.name": name}).run.name == name
    assert name_problem(name) is None


def test_child_path_never_leaves_its_parent(tmp_path):
    assert child_path(tmp_path, "a", key="k") == tmp_path / "a"
    for name in ("../a", "/etc", ".."):
        with pytest.raises(ConfigError):
            child_path(tmp_path, name, key="k")


def test_config_toml_is_valid_for_control_characters_in_any_string():
    weird = 'a\nb\x00c\x1f"\\d\x7f'
    config = load_config(None, {"run.out_dir": weird, "run.name": 'q"uote'})
    parsed = tomllib.loads(config_to_toml(config))        # an independent parser reads it back
    assert parsed["run"]["out_dir"] == weird and parsed["run"]["name"] == 'q"uote'
