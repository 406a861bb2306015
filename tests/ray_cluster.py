"""A real multi-node Ray cluster on this machine for tests: a head and worker nodes, each a separate
``ray start --block`` process in its own session (process group), every port chosen free.

The nodes are started with ``--node-ip-address 127.0.0.1``; Ray resolves a loopback address to the
machine's own address (``ray._private.services.resolve_ip_for_localhost``), so the nodes talk over
that address, which never leaves the machine either.

Stopping is by process group id (the ``ray start`` process and everything it started: raylet, GCS,
workers), never ``ray stop`` or a kill by name, which would also stop other users' Ray clusters on
the machine. ``stop()`` also sweeps any process that still carries one of the cluster's unique
temporary directory paths on its command line (a Ray process that started a new session of its own),
found by reading ``/proc``, so that nothing is left behind.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

RAY = str(Path(sys.executable).with_name("ray"))
# Fast failure detection, so that a killed node is noticed within seconds (defaults: ~30 s).
FAST_HEALTH_CHECKS = {"RAY_health_check_initial_delay_ms": "1000", "RAY_health_check_period_ms": "1000",
                      "RAY_health_check_timeout_ms": "1000", "RAY_health_check_failure_threshold": "3"}
_WORKER_PORTS = 24
OBJECT_STORE_BYTES = 200 * 1024 * 1024


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _range_is_free(start: int, count: int) -> bool:
    for port in range(start, start + count):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def free_port_range(count: int, taken: set[int]) -> int:
    """The first port of ``count`` consecutive free ports (none in ``taken``)."""
    import random

    for _ in range(200):
        start = random.randrange(20000, 60000 - count)
        if not taken.intersection(range(start, start + count)) and _range_is_free(start, count):
            return start
    raise RuntimeError(f"no {count} consecutive free ports found")


class LoopbackRayCluster:
    """``start(workers=2)``, ``address``, ``kill_node(i)``, ``stop()`` (module docstring)."""

    def __init__(self, *, head_cpus: int = 0, worker_cpus: int = 1, env: Optional[dict[str, str]] = None):
        self.head_cpus, self.worker_cpus = head_cpus, worker_cpus
        # Short path: Ray's unix sockets live under it (a socket path is limited to 107 bytes).
        self.root = Path(tempfile.mkdtemp(prefix="fhrc-"))
        self.env = {**os.environ, **FAST_HEALTH_CHECKS, "RAY_USAGE_STATS_ENABLED": "0", **(env or {})}
        self.nodes: list[subprocess.Popen] = []
        self.address: Optional[str] = None
        self._taken: set[int] = set()

    def _ports(self) -> list[str]:
        names = ["--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port",
                 "--dashboard-agent-grpc-port", "--metrics-export-port", "--runtime-env-agent-port"]
        args = []
        for name in names:
            port = free_port()
            while port in self._taken:
                port = free_port()
            self._taken.add(port)
            args += [name, str(port)]
        start = free_port_range(_WORKER_PORTS, self._taken)
        self._taken.update(range(start, start + _WORKER_PORTS))
        return args + ["--min-worker-port", str(start), "--max-worker-port", str(start + _WORKER_PORTS - 1)]

    def _start(self, args: list[str], log_name: str) -> subprocess.Popen:
        log = open(self.root / log_name, "w")
        try:
            # A small object store (the default claims 30% of the machine's memory per node).
            return subprocess.Popen([RAY, "start", "--block", "--node-ip-address", "127.0.0.1",
                                     "--disable-usage-stats", "--object-store-memory", str(OBJECT_STORE_BYTES),
                                     *args, *self._ports()],
                                    stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        finally:
            log.close()

    def start(self, workers: int = 2, timeout: float = 90.0) -> str:
        port, client_port, dashboard_port = free_port(), free_port(), free_port()
        self._taken.update({port, client_port, dashboard_port})
        # The dashboard's port too: with --include-dashboard false Ray still runs a minimal dashboard
        # head, which would otherwise take the default 8265 that another cluster may hold.
        self.nodes.append(self._start(["--head", "--port", str(port), "--ray-client-server-port", str(client_port),
                                       "--dashboard-port", str(dashboard_port), "--dashboard-host", "127.0.0.1",
                                       "--num-cpus", str(self.head_cpus), "--include-dashboard", "false",
                                       "--temp-dir", str(self.root / "ray")], "head.log"))
        self.address = f"127.0.0.1:{port}"
        self._wait_for_node(self.nodes[0], "head.log", timeout)
        # One worker at a time, each tried twice: on a loaded machine a node that registers while
        # another does can miss the GCS's 30 s startup deadline and exit.
        for index in range(workers):
            for attempt in range(2):
                node = self._start(["--address", self.address, "--num-cpus", str(self.worker_cpus)],
                                   f"worker{index}.{attempt}.log")
                self.nodes.append(node)
                try:
                    self._wait_for_node(node, f"worker{index}.{attempt}.log", timeout)
                    break
                except RuntimeError:
                    if attempt == 1 or node.poll() is None:
                        raise
                    self.nodes.remove(node)
        return self.address

    def _wait_for_node(self, node: subprocess.Popen, log_name: str, timeout: float) -> None:
        """Until ``ray start`` says the node runs: it prints that once the node registered with the
        GCS (reading its log costs nothing, a driver polling the GCS costs seconds of a loaded CPU)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "Ray runtime started" in (self.root / log_name).read_text(errors="replace"):
                return
            if node.poll() is not None:
                raise RuntimeError(f"a ray node exited ({node.returncode}); logs:\n{self.logs()}")
            time.sleep(0.2)
        raise RuntimeError(f"ray node not up after {timeout:.0f} s; logs:\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}" for p in sorted(self.root.glob("*.log")))

    def kill_node(self, index: int) -> None:
        """SIGKILL node ``index`` (0 is the head): its ``ray start`` process group."""
        node = self.nodes[index]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.pid, signal.SIGKILL)
        node.wait(timeout=10)

    def _strays(self) -> list[int]:
        """PIDs of processes whose command line names this cluster's temporary directory."""
        marker = str(self.root).encode()
        strays = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                if marker in (entry / "cmdline").read_bytes():
                    strays.append(int(entry.name))
            except OSError:
                continue
        return strays

    def stop(self) -> None:
        for node in reversed(self.nodes):
            if node.poll() is None:
                # SIGTERM first: `ray start --block` then stops its own node's processes.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.pid, signal.SIGTERM)
        for node in reversed(self.nodes):
            try:
                node.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.pid, signal.SIGKILL)     # whatever of the group is left
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.wait(timeout=5)
        for pid in self._strays():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)
