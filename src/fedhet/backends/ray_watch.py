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

While a watch runs, :func:`quiet_raylet_death_dump` keeps Ray's error thread from printing the dead
raylet's last 20 log lines ("Raylet is terminated ...") over the watch's line; they go to the
``fedhet`` debug log instead. That thread's printer is a Ray internal
(``ray._private.worker.print_to_stdstream``, checked on Ray 2.55): where it is missing, nothing is
changed and the dump is printed as before, the ``fedhet:`` line still last.
"""
from __future__ import annotations

import atexit
import logging
import os
import socket
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Optional

from fedhet.errors import FedhetError

logger = logging.getLogger(__name__)

CHECK_SECONDS = 0.2
GCS_MISSES = 10
GCS_CONNECT_TIMEOUT_SECONDS = 1.0


class RayWorkersLostError(FedhetError, RuntimeError):
    """The Ray backend lost its actors beyond its retry budget, or could not start any (defined
    here, beside the watch that raises its line, and imported by ``ray_backend``)."""


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


def lost_line(reason: str, hint: Optional[str]) -> tuple[str, int]:
    """The ``fedhet:`` line and exit status for Ray lost for ``reason`` (a :class:`RayWorkersLostError`)."""
    from fedhet.error_lines import error_line

    message = f"ray backend: {reason} mid-run; its actors and objects are gone"
    if hint:
        message += f". {hint}"
    return error_line(RayWorkersLostError(message))


# The sentinel: a small process that prints the line when the raylet ended before the driver did.
# pidfds (Linux 5.3) tell which ended first, to the microsecond: a driver killed by the user ends
# first (its raylet follows it, fate-shared), and then nothing is printed. Lines on stdin from the
# driver: "line <text>" (what to print), "done" (the session closed, or the driver printed it itself).
_SENTINEL = r"""
import os, select, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
try:
    driver, raylet = os.pidfd_open(int(sys.argv[1])), os.pidfd_open(int(sys.argv[2]))
except OSError:
    sys.exit(0)
pipe, line, pending, raylet_first = sys.stdin.fileno(), b"", b"", False
watched = [driver, raylet, pipe]
while True:
    ready = select.select(watched, [], [])[0]
    if pipe in ready:
        data = os.read(pipe, 65536)
        if not data:
            watched.remove(pipe)
        pending += data
        *lines, pending = pending.split(b"\n")
        for text in lines:
            if text == b"done":
                sys.exit(0)
            if text.startswith(b"line "):
                line = text[5:]
    if driver in ready:
        if raylet_first and line:
            os.write(2, line + b"\n")
        sys.exit(0)
    if raylet in ready:
        raylet_first = True
        watched.remove(raylet)
"""


class Sentinel:
    """The sentinel process for raylet ``raylet_pid`` of this driver (see ``_SENTINEL``): Ray's core
    worker ends the driver at its next touch of the object store once the raylet is gone, often
    before the watch thread's next check, so the line must be able to come from outside."""

    def __init__(self, raylet_pid: int):
        import subprocess

        self.raylet_pid = raylet_pid
        self.process: Optional[subprocess.Popen] = None
        if not hasattr(os, "pidfd_open"):
            return
        try:
            self.process = subprocess.Popen([sys.executable, "-I", "-S", "-c", _SENTINEL, str(os.getpid()),
                                             str(raylet_pid)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
        except OSError:
            self.process = None

    def send(self, text: str) -> None:
        if self.process is None or self.process.stdin is None:
            return
        try:
            self.process.stdin.write(text.encode("utf-8", errors="replace") + b"\n")
            self.process.stdin.flush()
        except (OSError, ValueError):        # it has ended: nothing more to tell it
            pass

    def close(self) -> None:
        if self.process is None:
            return
        self.send("done")
        try:
            self.process.wait(timeout=5)
        except Exception:  # noqa: BLE001  (bounded: it is told to stop, and stopped if it does not)
            self.process.kill()
            self.process.wait()
        if self.process.stdin is not None:
            try:
                self.process.stdin.close()
            except OSError:
                pass
        self.process = None


class RayLivenessWatch:
    """A daemon thread that calls ``lost(reason, hint)`` once when ``check()`` returns a reason (not
    None); ``hint`` is :attr:`hint` at that moment. Without ``lost``, it prints the line, calls
    ``cleanup`` and ends the process (:meth:`end_process`).

    ``check`` is called every ``interval`` seconds; :meth:`stop` ends the watch (before an orderly
    ``ray.shutdown``, which stops the raylet on purpose). With ``sentinel_for`` (a raylet's pid and
    the reason to print), a :class:`Sentinel` process prints the line if the driver ends first."""

    def __init__(self, check: Callable[[], Optional[str]],
                 lost: Optional[Callable[[str, Optional[str]], None]] = None, interval: float = CHECK_SECONDS,
                 cleanup: Callable[[], None] = lambda: None, sentinel_for: Optional[tuple[int, str]] = None):
        self.check = check
        self.lost = lost or self.end_process
        self.interval = interval
        self.cleanup = cleanup
        self._hint: Optional[str] = None
        self.sentinel = Sentinel(sentinel_for[0]) if sentinel_for is not None else None
        self._sentinel_reason = sentinel_for[1] if sentinel_for is not None else ""
        self._send_line()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="fedhet-ray-watch", daemon=True)
        self._thread.start()
        # Ray's own exit hook (ray.shutdown, registered earlier, so run later) stops the raylet on
        # purpose: the watch must end before it.
        atexit.register(self.stop)

    @property
    def hint(self) -> Optional[str]:
        """Appended to the line: the run's resume hint."""
        return self._hint

    @hint.setter
    def hint(self, value: Optional[str]) -> None:
        self._hint = value
        self._send_line()

    def _send_line(self) -> None:
        if self.sentinel is not None:
            self.sentinel.send("line " + lost_line(self._sentinel_reason, self._hint)[0])

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
        if self.sentinel is not None:
            self.sentinel.close()

    def end_process(self, reason: str, hint: Optional[str]) -> None:
        """One ``fedhet:`` line, ``cleanup()``, and the end of the process with that error's exit status
        (the sentinel told afterwards that the line is out: at worst it is printed twice, never not)."""
        line, status = lost_line(reason, hint)
        try:
            sys.stdout.flush()
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
            if self.sentinel is not None:
                self.sentinel.send("done")
            self.cleanup()
        finally:
            os._exit(status)


def raylet_check(pid: int) -> Callable[[], Optional[str]]:
    def check() -> Optional[str]:
        return raylet_reason(pid) if process_gone(pid) else None
    return check


def raylet_reason(pid: int) -> str:
    return f"the local Ray's raylet (pid {pid}) stopped"


def gcs_check(address: str, misses: int = GCS_MISSES) -> Callable[[], Optional[str]]:
    failed = [0]

    def check() -> Optional[str]:
        failed[0] = 0 if gcs_answers(address) else failed[0] + 1
        if failed[0] >= misses:
            return f"the Ray cluster's head at {address} stopped answering ({misses} connections to its GCS failed in a row)"
        return None
    return check


RAYLET_DEATH_PREFIX = "Raylet is terminated"


def quiet_raylet_death_dump(ray: Any) -> Callable[[], None]:
    """Send Ray's "Raylet is terminated ..." error message (published to the driver when its raylet
    dies, with the raylet's last log lines) to the debug log instead of stdout; every other message
    is printed as before. Returns the function that puts Ray's printer back."""
    module = getattr(getattr(ray, "_private", None), "worker", None)
    original = getattr(module, "print_to_stdstream", None)
    if module is None or original is None or getattr(original, "fedhet_quiet", False):
        return lambda: None

    def print_to_stdstream(data: Any, *args: Any, **kwargs: Any) -> Any:
        lines = data.get("lines") if isinstance(data, dict) else None
        if data.get("pid") == "raylet" and lines and str(lines[0]).startswith(RAYLET_DEATH_PREFIX):
            logger.debug("Ray: %s", "\n".join(map(str, lines)))
            return None
        return original(data, *args, **kwargs)

    print_to_stdstream.fedhet_quiet = True  # type: ignore[attr-defined]
    module.print_to_stdstream = print_to_stdstream

    def restore() -> None:
        if module.print_to_stdstream is print_to_stdstream:
            module.print_to_stdstream = original
    return restore
