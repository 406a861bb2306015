"""Sweep workers die with their sweep.

A worker that outlives its sweep (the sweep's process killed with SIGKILL, which it cannot catch)
would keep writing its run directory while a re-run of the sweep starts the same run again. Two
mechanisms prevent that:

- on Linux, the worker is started with ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` set between fork and
  exec (:func:`die_with_parent`), so the kernel kills it when the sweep's process ends;
- everywhere, the worker watches its parent (:func:`watch_parent`) and exits when its parent
  process changes (it was re-parented because the sweep ended).

Either way the worker's run-directory lock is released by the kernel, so a re-run of the sweep can
take over the directory.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time
from typing import Callable, Optional

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> Optional[Callable[[], None]]:
    """A ``preexec_fn`` for :class:`subprocess.Popen` that makes the child get SIGKILL when this
    process ends (Linux), or None where the kernel has no such option."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    prctl = libc.prctl
    parent = os.getpid()

    def set_death_signal() -> None:
        # Runs in the child between fork and exec: no allocation-heavy work, no locks.
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:     # the parent died before the call took effect
            os._exit(1)

    return set_death_signal


def watch_parent(parent_pid: int, interval: float = 0.5) -> threading.Thread:
    """Start a daemon thread that ends this process (exit status 1) once its parent is no longer
    ``parent_pid``."""
    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(interval)
        os._exit(1)

    thread = threading.Thread(target=watch, name="fedhet-parent-watch", daemon=True)
    thread.start()
    return thread
