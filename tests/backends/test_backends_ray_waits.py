"""Every wait of the Ray backend and of Ray sweeps is bounded and ends in one line naming what did
not answer (issue 23 item 3; campaign 2026-11-24 findings H1-H3). The address checks need no Ray."""
from __future__ import annotations

import http.server
import socket
import threading
import time
import types

import pytest

import fedhet.backends.ray_backend as ray_backend
from fedhet.backends.ray_backend import RayClusterUnreachableError, check_reachable
from fedhet.lab.sweep.grid import SweepError
from fedhet.lab.sweep.ray_executor import ray_session


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def http_server():
    """A TCP listener that is not Ray: Python's HTTP server on 127.0.0.1, stopped at the end."""
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_ray_address_at_a_non_ray_listener_is_refused_quickly(http_server):
    started = time.monotonic()
    with pytest.raises(RayClusterUnreachableError, match=r"run\.ray_address = .*: something listens there but "
                                                         r"it is not a Ray head"):
        check_reachable(http_server)
    assert time.monotonic() - started < 10


def test_a_silent_listener_is_refused_within_the_connect_timeout(monkeypatch):
    monkeypatch.setattr(ray_backend, "CONNECT_TIMEOUT_SECONDS", 1.0)
    with socket.socket() as listener:          # accepts connections (the kernel does) and never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        started = time.monotonic()
        with pytest.raises(RayClusterUnreachableError, match="no Ray cluster answers there"):
            check_reachable(f"127.0.0.1:{listener.getsockname()[1]}")
        assert time.monotonic() - started < 5


def _ray_that_must_not_be_called():
    def init(**_kwargs):
        raise AssertionError("ray.init was called for an address where no head answers")
    return types.SimpleNamespace(is_initialized=lambda: False, init=init, shutdown=lambda: None)


def test_sweep_ray_address_with_nothing_listening_is_refused():
    address = f"127.0.0.1:{_free_port()}"
    with pytest.raises(SweepError, match=rf"--ray-address = '{address}': no Ray cluster answers there"):
        with ray_session(_ray_that_must_not_be_called(), address):
            pass


def test_sweep_ray_address_at_a_non_ray_listener_is_refused(http_server):
    with pytest.raises(SweepError, match="--ray-address .* not a Ray head"):
        with ray_session(_ray_that_must_not_be_called(), http_server):
            pass


def _ray_that_must_not_start():
    def init(**_kwargs):
        raise AssertionError("ray.init was called before the actors' memory was checked")
    return types.SimpleNamespace(is_initialized=lambda: False, init=init, shutdown=lambda: None)


def test_too_many_local_actors_are_refused_before_ray_starts(tmp_path, monkeypatch, capsys):
    """A local Ray of run.ray_actors CPUs starts that many workers: on a small machine its startup
    timed out (an internal error after 37 s) before the memory check at the first round was reached."""
    from fedhet.cli import main
    from small_run import small_toml

    config = tmp_path / "small.toml"
    config.write_text(small_toml(rounds=2, progress=False, out_dir=str(tmp_path), name="many", backend="ray",
                                 ray_actors=100))
    monkeypatch.setattr(ray_backend, "import_ray", _ray_that_must_not_start)
    monkeypatch.setattr("fedhet.core.memory.available_memory", lambda *args: 4 * 10**9)
    started = time.monotonic()
    status = main(["run", str(config)])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2, err
    assert err[-1].startswith("fedhet: run.ray_actors = 100: about 25.0 GB for 100 actor processes")
    assert "Traceback" not in "\n".join(err) and time.monotonic() - started < 30


def test_a_local_ray_that_fails_to_start_is_one_line_and_leaves_no_temp_dir(monkeypatch, tmp_path):
    from fedhet.error_lines import error_line

    made = []

    def owned(prefix):
        made.append(tmp_path / f"{prefix}1")
        made[-1].mkdir()
        return made[-1]

    def init(**_kwargs):
        raise Exception("The current node timed out during startup. This could happen because ...")  # noqa: TRY002

    fake = types.SimpleNamespace(is_initialized=lambda: False, init=init, shutdown=lambda: None)
    monkeypatch.setattr(ray_backend, "import_ray", lambda: fake)
    monkeypatch.setattr(ray_backend, "owned_temp_dir", owned)
    monkeypatch.setattr(ray_backend, "remove_orphaned_temp_dirs", lambda prefix: None)
    with pytest.raises(ray_backend.RayStartError) as caught:
        ray_backend.RaySession(None, num_cpus=40, num_gpus=0.0)
    line, status = error_line(caught.value)
    assert line.startswith("fedhet: could not start a local Ray with 40 CPU(s) (The current node timed out during "
                           "startup. ") and "lower run.ray_actors" in line
    assert status == 2 and made and not made[0].exists()


def test_local_actors_beyond_free_memory_are_refused():
    from fedhet.backends.ray_backend import RayActorsTooManyError, check_local_actors_fit
    from fedhet.error_lines import error_line

    with pytest.raises(RayActorsTooManyError, match=r"run.ray_actors = 100: about 25.0 GB .* more than the 4.0 GB") as caught:
        check_local_actors_fit(100, available=4 * 10**9)
    assert error_line(caught.value)[1] == 2
    check_local_actors_fit(4, available=4 * 10**9)
