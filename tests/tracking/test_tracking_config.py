"""run.trackers and its options: names are validated with the config; a missing package is a
one-line error naming the extra, raised before any work; defaults keep everything local."""
import pytest

from fedhet.cli import main
from fedhet.config.schema import config_to_toml, load_config
from fedhet.core.options import ConfigError
from fedhet.errors import FedhetError
from fedhet.tracking import names
from fedhet.tracking.names import TrackerUnavailableError


def test_trackers_default_to_none_and_local_modes():
    run = load_config(None).run
    assert run.trackers == () and run.mlflow_uri is None and run.wandb_mode == "offline"


def test_trackers_round_trip_through_the_saved_config(tmp_path):
    config = load_config(None, ['run.trackers=["mlflow", "tensorboard"]', "run.tracker_project=proj"])
    assert config.run.trackers == ("mlflow", "tensorboard")
    path = tmp_path / "config.toml"
    path.write_text(config_to_toml(config))
    assert load_config(path) == config


@pytest.mark.parametrize("value, message", [
    ('["tensorbord"]', "unknown tracker 'tensorbord'; allowed: tensorboard, mlflow, wandb (pip install 'fedhet[tracking]')"),
    ('["mlflow", "mlflow"]', "a tracker is named twice"),
    ('"mlflow"', "expected list of str"),
])
def test_bad_tracker_names_are_config_errors(value, message):
    with pytest.raises(ConfigError) as error:
        load_config(None, [f"run.trackers={value}"])
    assert error.value.key == "run.trackers" and message in str(error.value)


def test_wandb_mode_is_offline_or_online():
    with pytest.raises(ConfigError, match="allowed: 'offline', 'online'"):
        load_config(None, ["run.wandb_mode=shared"])


@pytest.fixture
def without_wandb(monkeypatch):
    real = names.importlib.util.find_spec
    monkeypatch.setattr(names.importlib.util, "find_spec", lambda name: None if name == "wandb" else real(name))


def test_missing_package_names_the_extra_before_any_work(without_wandb, tmp_path):
    from fedhet.engine.runner import run_experiment

    config = load_config(None, ['run.trackers=["wandb"]', f"run.out_dir={tmp_path}"])
    with pytest.raises(TrackerUnavailableError) as error:
        run_experiment(config)
    assert isinstance(error.value, FedhetError) and isinstance(error.value, ImportError)
    assert str(error.value) == ("run.trackers includes 'wandb' but the wandb package is not installed; "
                                "install the tracking extra: pip install 'fedhet[tracking]'")
    assert list(tmp_path.iterdir()) == []       # nothing was created


def test_cli_prints_the_missing_package_as_one_line(without_wandb, tmp_path, capsys):
    path = tmp_path / "c.toml"
    path.write_text('[run]\ntrackers = ["wandb"]\nprogress = false\n')
    code = main(["run", str(path), "--set", f"run.out_dir={tmp_path / 'out'}"])
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "fedhet: run.trackers includes 'wandb' but the wandb package is not installed; "
        "install the tracking extra: pip install 'fedhet[tracking]'"]


def test_validation_does_not_import_tracker_packages():
    import sys

    before = {name for name in ("mlflow", "wandb", "tensorboard") if name in sys.modules}
    load_config(None, ['run.trackers=["mlflow", "wandb", "tensorboard"]'])
    assert {name for name in ("mlflow", "wandb", "tensorboard") if name in sys.modules} == before


@pytest.mark.parametrize("key, value", [
    ("run.tracker_project", '"a/b"'), ("run.tracker_project", '""'), ("run.mlflow_uri", '" "'),
    ("run.mlflow_uri", '"file:/x\\n"'),
])
def test_bad_tracking_options_are_config_errors(key, value):
    with pytest.raises(ConfigError) as error:
        load_config(None, [f"{key}={value}"])
    assert error.value.key == key
