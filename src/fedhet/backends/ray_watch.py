"""A watch on the Ray processes a driver cannot outlive: its local raylet and the cluster's GCS.

When the local raylet dies (killed, out of memory), Ray's core worker in the driver ends the
process from C++ at its next call to the raylet (``_Exit(1)``): no Python exception, ``finally``
or ``atexit`` runs, and all the user sees is the raylet's last log lines, which Ray's error thread
prints. When the head of a joined cluster dies, the driver retries the GCS for 60 s and then ends
the same way. Neither says what happened or how to go on.

So a :class:`RayLivenessWatch` thread checks, every :data:`CHECK_SECONDS`, that the private Ray's
raylet process is alive (a child of this process: its ``/proc`` state, a zombie counting as dead)
or that the GCS of a joined cluster still accepts connections (:data:`GCS_MISSES` checks in a row
may fail, so one slow accept is not a loss). On a loss it prints one ``fedhet:`` line, with the
resume hint the run sets (:attr:`RayLivenessWatch.hint`), and ends the process itself with the
status of that error: Ray would end it a moment later anyway, without the line. The last
checkpoint is intact (checkpoints are written atomically), so the run resumes from it.

The watch is Linux-only for the raylet (``/proc``); the GCS check works anywhere.
"""
from __future__ import annotations

import atexit
import os
import socket
import sys
import threading
from pathlib import Path
from typing import Callable, Optional

CHECK_SECONDS = 0.2
GCS_MISSES = 5
GCS_CONNECT_TIMEOUT_SECONDS = 1.0


def process_gone(pid: int, proc: Path = Path("/proc")) -> bool:
    """Whether process ``pid`` has ended: no ``/proc`` entry, or a zombie (ended, not yet reaped by
    its parent, which for a private Ray's raylet is this very process)."""
    try:
        stat = (proc / str(pid) / "stat").read_bytes()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    # "pid (comm) state ...": comm may hold spaces and parentheses, the state follows the last ")".
    fields = stat.rsplit(b")", 1)[-1].split()
    return bool(fields) and fields[0] in (b"Z", b"X")


def child_processes_named(name: str, parent: Optional[int] = None, proc: Path = Path("/proc")) -> list[int]:
    """Process ids of the children of ``parent`` (this process by default) whose command name is ``name``."""
    me = os.getpid() if parent is None else parent
    found = []
    try:
        entries = list(proc.iterdir())
    except OSError:
        return []
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
        except OSError:
            continue
        head, _, rest = stat.rpartition(b")")
        comm = head.partition(b"(")[2].decode(errors="replace")
        fields = rest.split()
        if comm == name and len(fields) > 1 and fields[1] == str(me).encode():
            found.append(int(entry.name))
    return found


def gcs_answers(address: str, timeout: float = GCS_CONNECT_TIMEOUT_SECONDS) -> bool:
    """Whether ``host:port`` accepts a TCP connection within ``timeout``."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


class RayLivenessWatch:
    """A daemon thread that calls ``lost(reason, hint)`` once when ``check()`` returns a reason (not
    None); ``hint`` is :attr:`hint` at that moment.

    ``check`` is called every ``interval`` seconds; :meth:`stop` ends the watch (before an orderly
    ``ray.shutdown``, which stops the raylet on purpose)."""

    def __init__(self, check: Callable[[], Optional[str]], lost: Callable[[str, Optional[str]], None],
                 interval: float = CHECK_SECONDS):
        self.check = check
        self.lost = lost
        self.interval = interval
        self.hint: Optional[str] = None      # appended to the line: the run's resume hint
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="fedhet-ray-watch", daemon=True)
        self._thread.start()
        # Ray's own exit hook (ray.shutdown, registered earlier, so run later) stops the raylet on
        # purpose: the watch must end before it.
        atexit.register(self.stop)

    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            reason = self.check()
            if reason is not None and not self._stop.is_set():
                self.lost(reason, self.hint)
                return

    def stop(self) -> None:
        self._stop.set()
        atexit.unregister(self.stop)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5 * self.interval + GCS_CONNECT_TIMEOUT_SECONDS)


def raylet_check(pid: int) -> Callable[[], Optional[str]]:
    def check() -> Optional[str]:
        return f"the local Ray's raylet (pid {pid}) stopped" if process_gone(pid) else None
    return check


def gcs_check(address: str, misses: int = GCS_MISSES) -> Callable[[], Optional[str]]:
    failed = [0]

    def check() -> Optional[str]:
        failed[0] = 0 if gcs_answers(address) else failed[0] + 1
        if failed[0] >= misses:
            return f"the Ray cluster's head at {address} stopped answering (its GCS refused {misses} connections)"
        return None
    return check


def end_process(cleanup: Callable[[], None]) -> Callable[[str, Optional[str]], None]:
    """What a watch does on a loss: one ``fedhet:`` line (a :class:`RayWorkersLostError`, with the
    watch's hint), ``cleanup()``, and the end of the process with that error's exit status."""
    def lost(reason: str, hint: Optional[str]) -> None:
        from fedhet.backends.ray_backend import RayWorkersLostError
        from fedhet.error_lines import error_line

        message = f"ray backend: {reason} mid-run; its actors and objects are gone"
        if hint:
            message += f". {hint}"
        line, status = error_line(RayWorkersLostError(message))
        try:
            sys.stdout.flush()
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
            cleanup()
        finally:
            os._exit(status)
    return lost
