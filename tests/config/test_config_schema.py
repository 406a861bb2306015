import pytest

from fedhet.cli import main
from fedhet.config.schema import config_to_toml, load_config, parse_override, resolve_config
from fedhet.core.options import ConfigError


def test_defaults_resolve_and_round_trip_through_toml(tmp_path):
    config = load_config(None, ["run.rounds=7", "client.learning_rate=0.05", "partition.name=dirichlet",
                                "partition.alpha=0.1"])
    assert config.run.rounds == 7
    assert config.client.options.learning_rate == 0.05
    path = tmp_path / "config.toml"
    path.write_text(config_to_toml(config))
    assert load_config(path) == config


@pytest.mark.parametrize("override, key, fragment", [
    ("client.learning_rat=0.1", "client.learning_rat", "did you mean client.learning_rate"),
    ("run.rounds=0", "run.rounds", ">= 1"),
    ("run.rounds=1.5", "run.rounds", "integer"),
    ("client.learning_rate=-1", "client.learning_rate", "> 0"),
    ("client.learning_rate=abc", "client.learning_rate", "number"),
    ("partition.name=dirichlt", "partition.name", "allowed"),
    ("run.device=gpu9", "run.device", "allowed"),
    ("bogus.key=1", "bogus.key", "unknown section"),
    ("client.lr_decay=1.5", "client.lr_decay", "<= 1"),
])
def test_bad_values_name_key_value_and_allowed(override, key, fragment):
    with pytest.raises(ConfigError) as info:
        load_config(None, [override])
    assert info.value.key == key
    assert fragment in str(info.value)


def test_option_valid_only_for_another_component_is_rejected():
    # alpha belongs to the dirichlet partitioner, not to iid
    with pytest.raises(ConfigError, match="partition.alpha"):
        load_config(None, ["partition.name=iid", "partition.alpha=0.1"])


def test_epochs_and_steps_cannot_both_be_zero():
    with pytest.raises(ConfigError, match="client.epochs"):
        load_config(None, ["client.epochs=0", "client.steps=0"])


def test_override_values_are_parsed_as_toml_for_the_option_type():
    config = load_config(None, ["run.name=nan", "run.rounds=3", "run.progress=false", "model.hidden=[10, 20]",
                                "run.threads=none", "client.learning_rate=1e-2"])
    assert config.run.name == "nan"
    assert config.run.rounds == 3 and config.run.progress is False and config.run.threads is None
    assert config.model.options.hidden == (10, 20)
    assert config.client.options.learning_rate == 0.01
    assert parse_override("model.hidden=[10, 20]") == ("model.hidden", [10, 20])
    with pytest.raises(ConfigError, match="expected an integer"):
        load_config(None, ["run.rounds=three"])


def test_unknown_top_level_section_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="unknown section"):
        resolve_config({"runs": {"rounds": 3}})
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[run\nrounds=")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_cli_misspelled_key_exits_2_and_names_it(tmp_path, capsys):
    config = tmp_path / "c.toml"
    config.write_text("[run]\nrounds = 2\n")
    status = main(["run", str(config), "--set", "client.learning_rat=0.1"])
    assert status == 2
    err = capsys.readouterr().err
    assert "client.learning_rat" in err and "learning_rate" in err


def test_cli_check_prints_resolved_config(tmp_path, capsys):
    assert main(["check", "--set", "run.rounds=3"]) == 0
    out = capsys.readouterr().out
    assert "rounds = 3" in out and "[client]" in out
