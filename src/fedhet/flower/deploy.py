"""A loopback Flower deployment: a SuperLink and SuperNodes as separate processes on 127.0.0.1.

Used by the tests and ``fedhet flower loopback``; ``scripts/flower_loopback.sh`` does the same in bash.
Every process is started in its own session and stopped by its id (its process group: the SuperLink
and SuperNodes start Flower's SuperExec and app processes as children), never by name, so other
Flower deployments on the machine are left alone. Ports are picked free at start.
"""
from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from fedhet.errors import FedhetError


class LoopbackError(FedhetError, RuntimeError):
    """A loopback SuperLink or SuperNode did not start, or ``flwr run`` failed."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def flower_command(name: str) -> str:
    """A Flower executable next to this interpreter (the venv's), else on PATH."""
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.exists() else name


def _wait_port(port: int, process: subprocess.Popen, timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise LoopbackError(f"{what} exited with status {process.returncode}; see {log}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise LoopbackError(f"{what} did not listen on 127.0.0.1:{port} within {timeout:g} s; see {log}")


@dataclasses.dataclass
class Loopback:
    """A running loopback federation; :meth:`stop` (or leaving the ``with`` block) ends every process."""

    workdir: Path
    port: int
    superlink: subprocess.Popen
    supernodes: list[subprocess.Popen]
    env: dict[str, str]
    apps: list[subprocess.Popen] = dataclasses.field(default_factory=list)   # flwr run processes

    @property
    def flwr_home(self) -> Path:
        return self.workdir / "flwr-home"

    def start_app(self, app_dir: str | Path) -> subprocess.Popen:
        """Start ``flwr run APP loopback --stream`` (submit the app and follow it until the run ends); its
        output goes to ``workdir/flwr-run.log``. The caller waits for it (:meth:`wait_app`)."""
        with open(self.workdir / "flwr-run.log", "w") as out:
            process = subprocess.Popen([flower_command("flwr"), "run", str(app_dir), "loopback", "--stream"],
                                       stdout=out, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        self.apps.append(process)
        return process

    def wait_app(self, process: subprocess.Popen, timeout: float) -> None:
        log = self.workdir / "flwr-run.log"
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(process)
            raise LoopbackError(f"flwr run did not finish within {timeout:g} s; see {log}") from None
        if process.returncode != 0:
            raise LoopbackError(f"flwr run exited with status {process.returncode}; see {log}")

    def run_app(self, app_dir: str | Path, timeout: float) -> None:
        self.wait_app(self.start_app(app_dir), timeout)

    def kill_supernode(self, index: int) -> None:
        """Kill SuperNode ``index`` (SIGKILL, with its SuperExec and ClientApp processes): a node dying."""
        _signal_group(self.supernodes[index], signal.SIGKILL)

    def stop(self) -> None:
        for process in [*self.apps, *self.supernodes, self.superlink]:
            _stop(process)

    def __enter__(self) -> "Loopback":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)     # the process's own session (start_new_session): pgid == pid
    except ProcessLookupError:
        pass


def _stop(process: subprocess.Popen, grace: float = 5.0) -> None:
    if process.poll() is None:
        _signal_group(process, signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    # Children (SuperExec, app processes) may outlive a parent that exited: end the group too.
    _signal_group(process, signal.SIGKILL)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass


def start_loopback(workdir: str | Path, node_configs: list[str], *, start_timeout: float = 60.0,
                   env: Optional[dict[str, str]] = None) -> Loopback:
    """Start a SuperLink and one SuperNode per ``node_configs`` entry (e.g. ``"partition-id=0
    num-partitions=2"``), all insecure on 127.0.0.1 with free ports, and a Flower config in
    ``workdir/flwr-home`` naming the SuperLink ``loopback``."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ if env is None else env)
    env["FLWR_HOME"] = str(workdir / "flwr-home")
    # The SuperLink and SuperNodes start flower-superexec by name: the venv's bin directory first.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    # SuperExec polls for new app tasks every second by default; a loopback round waits on it twice.
    env.setdefault("FLWR_SUPEREXEC_TASK_POLL_INTERVAL", "0.2")
    port = free_port()
    (workdir / "flwr-home").mkdir(exist_ok=True)
    (workdir / "flwr-home" / "config.toml").write_text(
        f'[superlink]\ndefault = "loopback"\n\n[superlink.loopback]\naddress = "127.0.0.1:{port}"\ninsecure = true\n')
    started: list[subprocess.Popen] = []

    def launch(command: list[str], log: Path) -> subprocess.Popen:
        with open(log, "w") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=workdir,
                                       start_new_session=True)
        started.append(process)
        return process

    try:
        link_log = workdir / "superlink.log"
        superlink = launch([flower_command("flower-superlink"), "--insecure", "--host", "127.0.0.1", "--port", str(port),
                            "--disable-runtime-dependency-installation"], link_log)
        _wait_port(port, superlink, start_timeout, "the SuperLink", link_log)
        supernodes = []
        for index, node_config in enumerate(node_configs):
            node_port = free_port()
            node_log = workdir / f"supernode-{index}.log"
            supernodes.append(launch([flower_command("flower-supernode"), "--insecure", "--superlink",
                                      f"127.0.0.1:{port}", "--host", "127.0.0.1", "--port", str(node_port),
                                      "--node-config", node_config, "--max-wait-time", str(start_timeout)],
                                     node_log))
            _wait_port(node_port, supernodes[-1], start_timeout, f"SuperNode {index}", node_log)
    except BaseException:
        for process in started:
            _stop(process)
        raise
    return Loopback(workdir=workdir, port=port, superlink=superlink, supernodes=supernodes, env=env)
