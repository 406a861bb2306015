"""An MLflow server URI where nothing listens is refused within seconds with one line, before the
run trains (campaign 2026-11-24 finding H4: MLflow retried for 249 s, then a 'bug in fedhet')."""
import socket
import time

import pytest

from fedhet.config.schema import load_config
from fedhet.engine.runner import run_experiment
from fedhet.error_lines import error_line
from fedhet.tracking.mlflow import MlflowServerUnreachableError, check_server
from small_run import SMALL

pytest.importorskip("mlflow")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_mlflow_uri_at_a_closed_port_is_refused_quickly(tmp_path):
    uri = f"http://127.0.0.1:{_closed_port()}"
    started = time.monotonic()
    with pytest.raises(MlflowServerUnreachableError) as caught:
        run_experiment(load_config(None, [*SMALL, f"run.out_dir={tmp_path}", "run.name=m", 'run.trackers=["mlflow"]',
                                          f'run.mlflow_uri="{uri}"']))
    assert time.monotonic() - started < 60
    line, status = error_line(caught.value)
    assert line.startswith(f"fedhet: run.mlflow_uri = '{uri}': no MLflow server answers there") and status == 2
    assert not (tmp_path / "m" / "summary.json").exists()


def test_local_stores_are_not_probed():
    check_server("file:///nonexistent/mlruns")
    check_server("sqlite:///mlflow.db")
