"""The sweep's local worker processes: ``jobs`` long-lived ``fedhet.lab.sweep.worker --serve``
processes, each running one run at a time and then the next.

A worker pays the interpreter, the imports and each dataset's loading once, not once per run (about
2 CPU s a run on Fashion-MNIST: benchmarks/README.md, "Claims workload"). Every worker has one torch
thread (``OMP_NUM_THREADS=1``; see :mod:`fedhet.lab.sweep.execute`). A worker that dies (killed,
out of memory) fails the run it was running; the next run gets a fresh worker.
"""
from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Iterator, Optional

from fedhet.config import config_to_toml
from fedhet.lab.sweep.lifetime import die_with_parent
from fedhet.lab.sweep.plan import RESUME, PlannedRun


def worker_environment() -> dict[str, str]:
    env = dict(os.environ)
    env.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"})
    # The worker imports this same fedhet (an uninstalled source tree included).
    source_root = str(Path(__file__).resolve().parents[3])   # src/fedhet/lab/sweep/worker_pool.py -> src
    env["PYTHONPATH"] = os.pathsep.join(p for p in (source_root, env.get("PYTHONPATH", "")) if p)
    return env


class _Worker:
    """One serving worker process and the run it is running (``None`` when idle)."""

    def __init__(self):
        command = [sys.executable, "-m", "fedhet.lab.sweep.worker", "--serve", "--parent-pid", str(os.getpid())]
        # Its standard error before and between runs (nothing, unless the interpreter itself fails)
        # is dropped: a run's messages go to that run's sweep.log (fedhet.lab.sweep.worker).
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, env=worker_environment(), text=True,
                                        preexec_fn=die_with_parent())
        self.run: Optional[PlannedRun] = None
        self.buffer = ""

    def start(self, run: PlannedRun, state: str) -> None:
        assert self.process.stdin is not None
        request = {"run_dir": str(run.run_dir), "resume": state == RESUME,
                   "config": None if state == RESUME else config_to_toml(run.config)}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        self.run = run

    @property
    def output(self) -> IO[str]:
        """The pipe the worker answers on (opened with ``stdout=PIPE``, so never None)."""
        assert self.process.stdout is not None
        return self.process.stdout


class WorkerPool:
    """At most ``jobs`` runs at a time on serving workers; :meth:`finished` yields ``(run, status)``
    as runs end (status 0: finished; 1, 2, 3: failed, with the command line's status of the failure:
    the machine, the run's input, a bug; otherwise the worker died before answering: its exit status,
    negative for a signal, -1 when it exited with 0 to 3)."""

    def __init__(self, jobs: int):
        self.jobs = jobs
        self.workers: list[_Worker] = []
        self.selector = selectors.DefaultSelector()

    @property
    def running(self) -> list[PlannedRun]:
        return [w.run for w in self.workers if w.run is not None]

    def has_idle(self) -> bool:
        return len(self.running) < self.jobs

    def start(self, run: PlannedRun, state: str) -> None:
        worker = next((w for w in self.workers if w.run is None), None)
        if worker is None:
            worker = _Worker()
            self.workers.append(worker)
            self.selector.register(worker.output, selectors.EVENT_READ, worker)
        worker.start(run, state)

    def finished(self, timeout: float) -> Iterator[tuple[PlannedRun, int]]:
        """The runs that ended, after waiting at most ``timeout`` seconds for a worker to answer."""
        for key, _ in self.selector.select(timeout):
            yield from self._read(key.data)

    def _read(self, worker: _Worker) -> Iterator[tuple[PlannedRun, int]]:
        chunk = os.read(worker.output.fileno(), 65536).decode("utf-8", "replace")
        if not chunk:                       # the worker ended: its run (if any) failed
            self.selector.unregister(worker.output)
            self.workers.remove(worker)
            status = worker.process.wait()
            if worker.run is not None:
                yield worker.run, status if status not in (0, 1, 2, 3) else -1
            return
        worker.buffer += chunk
        while "\n" in worker.buffer:
            line, worker.buffer = worker.buffer.split("\n", 1)
            reply = json.loads(line)
            run, worker.run = worker.run, None
            if run is not None and reply["run_dir"] == str(run.run_dir):
                yield run, int(reply["status"])

    def close(self) -> None:
        """End every worker: idle ones by closing their input, running ones by SIGTERM."""
        for worker in self.workers:
            if worker.run is not None and worker.process.poll() is None:
                worker.process.terminate()
            elif worker.process.stdin is not None:
                try:
                    worker.process.stdin.close()
                except OSError:
                    pass
        deadline = time.monotonic() + 10
        for worker in self.workers:
            try:
                worker.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()
            if worker.process.stdout is not None:
                worker.process.stdout.close()
        self.workers = []
        self.selector.close()
