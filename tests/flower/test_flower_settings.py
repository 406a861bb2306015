"""The app's run config, the SuperNodes' client ids, the options a deployment refuses, the CLI."""
from __future__ import annotations

import tomllib

import pytest

pytest.importorskip("flwr")

from fedhet.cli import main  # noqa: E402
from fedhet.core.options import ConfigError  # noqa: E402
from fedhet.flower import build  # noqa: E402
from fedhet.flower.client_app import NodeConfigError, hosted_clients  # noqa: E402
from fedhet.flower.settings import AppSettings, app_pyproject, write_app  # noqa: E402
from flower_cases import LOOPBACK_CONFIG, small_config  # noqa: E402


def test_hosted_clients_rules():
    assert hosted_clients({"partition-id": 1, "num-partitions": 3}, 8) == [1, 4, 7]
    assert hosted_clients({"client-ids": "5, 0,3"}, 8) == [0, 3, 5]
    assert hosted_clients({}, 3) == [0, 1, 2]
    with pytest.raises(NodeConfigError, match="partition-id = 3"):
        hosted_clients({"partition-id": 3, "num-partitions": 3}, 8)
    with pytest.raises(NodeConfigError, match="needs both"):
        hosted_clients({"partition-id": 0}, 8)
    with pytest.raises(NodeConfigError, match=r"clients 0\.\.7"):
        hosted_clients({"client-ids": "2,9"}, 8)


def test_settings_round_trip_through_the_apps_pyproject(tmp_path):
    config = small_config([])
    settings = AppSettings(config_text=build.config_text(config), participation="nodes", round_timeout=7.5,
                           min_nodes=2, result_dir=str(tmp_path))
    parsed = tomllib.loads(app_pyproject(settings))
    assert AppSettings.from_run_config(parsed["tool"]["flwr"]["app"]["config"]) == settings
    assert build.config_from_text(settings.config_text) == config
    with pytest.raises(ConfigError, match="participation"):
        AppSettings(config_text="", participation="everyone")
    with pytest.raises(ConfigError, match="fedhet-config"):
        AppSettings.from_run_config({})


def test_written_app_is_a_valid_flower_app(tmp_path):
    """Flower's own validation of the app directory (the check `flwr run` makes, modules imported)."""
    from flwr.common.config import validate_config

    directory = write_app(tmp_path / "app", AppSettings(config_text=build.config_text(small_config([]))))
    config = tomllib.loads((directory / "pyproject.toml").read_text())
    valid, errors, _ = validate_config(config, check_module=True, project_dir=directory)
    assert valid, errors


@pytest.mark.parametrize("override, key", [("run.backend=processes", "run.backend"),
                                           ("run.store_mmap=true", "run.store_mmap"),
                                           ("run.stop_at_target=true", "run.stop_at_target"),
                                           ("system.policy=sync", "system")])
def test_deployment_refuses_options_without_meaning(override, key, tmp_path, capsys):
    with pytest.raises(ConfigError, match=key):
        build.check_deployable(small_config([override]))
    status = main(["flower", "app", str(LOOPBACK_CONFIG), "--out", str(tmp_path / "app"), "--set", override])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and err[0].startswith(f"fedhet: configuration error: {key} = ")
    assert not (tmp_path / "app").exists()


def test_cli_writes_the_app(tmp_path, capsys):
    assert main(["flower", "app", str(LOOPBACK_CONFIG), "--out", str(tmp_path / "app"), "--min-nodes", "2",
                 "--result-dir", str(tmp_path / "out")]) == 0
    run_config = tomllib.loads((tmp_path / "app" / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    settings = AppSettings.from_run_config(run_config)
    assert settings.min_nodes == 2 and settings.result_dir == str((tmp_path / "out").resolve())
    assert build.config_from_text(settings.config_text).server.name == "fedaware"
