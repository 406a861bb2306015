"""What the flower commands say when a deployment fails, and that SIGTERM stops the loopback
federation like SIGINT (campaign 2026-11-24 findings M1, M5 (planted params.pt) and P1)."""
from __future__ import annotations

import os
import signal

import pytest
import torch

pytest.importorskip("flwr")

from fedhet.flower import build  # noqa: E402
from fedhet.flower.client_app import app as client_app  # noqa: E402
from fedhet.flower.commands import FlowerResultError, _sigterm_as_interrupt, load_deployed_params  # noqa: E402
from fedhet.flower.local_grid import LocalGrid, run_local  # noqa: E402
from fedhet.flower.server_app import app as server_app  # noqa: E402
from fedhet.flower.settings import AppSettings  # noqa: E402
from flower_cases import METHODS, small_config, two_nodes  # noqa: E402


def _run_config(tmp_path, **changes):
    config = small_config(METHODS["fedavg"], rounds=2)
    run_config = AppSettings(config_text=build.config_text(config), round_timeout=5.0,
                             result_dir=str(tmp_path / "result")).to_run_config()
    run_config.update(changes)
    return run_config


def test_a_serverapp_failure_is_reported_instead_of_missing_params(tmp_path):
    run_config = _run_config(tmp_path, **{"round-timeout": "abc"})
    (tmp_path / "result").mkdir()
    torch.save(torch.zeros(3), tmp_path / "result" / "params.pt")          # an earlier run's result
    with pytest.raises(Exception):
        run_local(server_app, LocalGrid(client_app, two_nodes(), run_config))
    assert not (tmp_path / "result" / "params.pt").exists()               # never mistaken for this run's
    with pytest.raises(FlowerResultError, match=r"wrote no model .*round-timeout = 'abc'.*a number") as caught:
        load_deployed_params(tmp_path / "result")
    assert "\n" not in str(caught.value)


def test_without_error_file_the_logs_last_error_line_is_quoted(tmp_path):
    log = tmp_path / "flwr-run.log"
    log.write_text("starting\nTraceback ...\nflwr.common.DeploymentError: 1 SuperNode(s) connected\nbye\n")
    (tmp_path / "result").mkdir()
    with pytest.raises(FlowerResultError, match="DeploymentError: 1 SuperNode"):
        load_deployed_params(tmp_path / "result", log)


def test_a_successful_app_leaves_params_and_no_error(tmp_path):
    run_local(server_app, LocalGrid(client_app, two_nodes(), _run_config(tmp_path)))
    assert isinstance(load_deployed_params(tmp_path / "result"), torch.Tensor)
    assert not (tmp_path / "result" / "error.txt").exists()


def test_a_planted_non_tensor_params_is_one_line(tmp_path):
    torch.save({"not": "a tensor"}, tmp_path / "params.pt")
    with pytest.raises(FlowerResultError, match="holds a dict"):
        load_deployed_params(tmp_path)

    class Planted:
        def __reduce__(self):
            return (os.system, ("true",))

    torch.save(Planted(), tmp_path / "params.pt")
    with pytest.raises(FlowerResultError, match="cannot be read as tensors") as caught:
        load_deployed_params(tmp_path)
    assert "weights_only=False" not in str(caught.value)


def test_sigterm_stops_the_federation_block_like_sigint():
    stopped = []

    class Federation:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            stopped.append(exc[0])

    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        with _sigterm_as_interrupt(), Federation():
            os.kill(os.getpid(), signal.SIGTERM)
    assert stopped == [KeyboardInterrupt]
    assert signal.getsignal(signal.SIGTERM) == previous


def test_a_deployment_where_nobody_arrived_warns(tmp_path, capsys):
    from fedhet.flower.commands import _warn_if_nobody_arrived

    torch.save(torch.zeros(3, 6, dtype=torch.bool), tmp_path / "participation.pt")
    _warn_if_nobody_arrived(tmp_path, 0.05)
    assert "no client's reply arrived in any round" in capsys.readouterr().err
    log = torch.zeros(3, 6, dtype=torch.bool)
    log[1, 2] = True
    torch.save(log, tmp_path / "participation.pt")
    _warn_if_nobody_arrived(tmp_path, 0.05)
    assert capsys.readouterr().err == ""
