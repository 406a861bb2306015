"""Sweeps on a Ray cluster: each run is one Ray task holding its own resource bundle.

``fedhet sweep CONFIG --executor ray [--ray-address auto] [--ray-cpus-per-run 2]`` (or the base
file's ``[sweep]`` table, :mod:`fedhet.lab.sweep.options`) submits every run that is not
finished as a task reserving ``ray_cpus_per_run`` CPUs and ``ray_gpus_per_run`` GPUs; Ray places
the tasks on the cluster's nodes, as many at a time as the resources allow. Everything else is
the sweep's usual machinery (:mod:`fedhet.lab.sweep.execute`): the plan, finished runs skipped,
interrupted ones resumed, ``sweep.json``, one progress line per run, failed runs listed.

Where a run's directory is written (``ray_transfer``):

- ``shared``: the task runs the run in place, in the run directory under the sweep directory,
  which must be visible at the same path on every node (one machine, or a shared filesystem). The
  run writes its own checkpoints there.
- ``files``: the task runs the run in a temporary directory on its node. It ships the directory's
  changed files (bytes) back to the sweep's process after the run's start (with its round-0
  checkpoint), after every checkpoint (``run.checkpoint_every``) and at the end; the sweep's
  process writes them into the run directory atomically and in an order that keeps it resumable
  (:mod:`fedhet.lab.sweep.run_files`). A resumed run's files travel to the node first (through
  Ray's object store). The temporary directory is removed when the task ends.
- ``auto`` (default): each task checks whether a probe file that the sweep wrote in the sweep
  directory is visible on its node: in place when it is, files otherwise.

Failures: a run that raises is a failed run, as in a local sweep (listed; running the sweep again
retries it from its checkpoint). A task lost to the system (its worker process or its node died)
is submitted again, up to ``ray_max_attempts`` attempts in all, and resumes from the last
checkpoint that reached the run directory; every random stream is keyed by (seed, round, client),
so the resumed run's numbers are those of an uninterrupted one.

Each run's torch threads (and the processes backend's process count) are set to its bundle's CPUs
(``run.threads``, which does not change the numbers). Every node needs the same fedhet and its
dependencies importable (installed, or ``PYTHONPATH`` in the environment of ``ray start``).
With no address, the sweep starts a local Ray (its own temporary directory, no dashboard) and
stops it afterwards; in a process already connected to Ray (``ray.init`` called) that connection
is used and left open.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import secrets
import shutil
import socket
import threading
import tomllib
import traceback
from pathlib import Path
from typing import Any, Iterator, Optional

from fedhet.core import append_log_text, owned_temp_dir, remove_orphaned_temp_dirs
from fedhet.engine import Callback, DirectoryLock, RunDirectoryInUseError, clear_run_directory
from fedhet.lab.sweep.grid import SweepError
from fedhet.lab.sweep.options import SweepOptions
from fedhet.lab.sweep.outcome import RunOutcome, show_outcome, tail_of
from fedhet.lab.sweep.plan import NEW, RESUME, PlannedRun, SweepPlan, read_summary, run_state
from fedhet.lab.sweep.progress import DONE, FAILED, RUNNING, SweepProgress
from fedhet.lab.sweep.run_files import ChangeTracker, append_log, file_signatures, read_run_files, write_run_files
from fedhet.lab.sweep.worker import LOG_FILE, execute_run

RAY_EXTRA = "pip install 'fedhet[ray]'"
PROBE_NAME = ".fedhet-ray-probe"
# Kinds of the messages a run's task yields (in this order: started, then any progress/files, then one final).
STARTED, PROGRESS, FILES, FINISHED, RUN_FAILED = "started", "progress", "files", "finished", "failed"


def import_ray() -> Any:
    """The ``ray`` module, or a one-line :class:`SweepError` naming the extra to install."""
    try:
        import ray
    except ImportError:
        raise SweepError(f"--executor ray needs the optional package ray: {RAY_EXTRA}") from None
    return ray


# --- the task, on a Ray worker -----------------------------------------------------------------


class _Reporter(Callback):
    """Sends the run's progress, and in ``files`` mode its changed files at every checkpoint."""

    def __init__(self, emit, tracker: Optional[ChangeTracker], run_dir: Path):
        self.emit, self.tracker, self.run_dir = emit, tracker, run_dir
        self.checkpoint = None

    def _checkpoint_signature(self):
        try:
            stat = (self.run_dir / "checkpoint.pt").stat()
        except FileNotFoundError:
            return None
        return stat.st_ino, stat.st_size, stat.st_mtime_ns

    def _ship(self, **progress) -> None:
        assert self.tracker is not None     # shipped only when the run's files are not shared
        files, removed = self.tracker.changes()
        self.emit({"kind": FILES, "files": files, "removed": removed, **progress})

    def on_run_start(self, run) -> None:
        self.checkpoint = self._checkpoint_signature()
        if self.tracker is not None:
            self._ship()          # the round-0 (or resumed) checkpoint, config.toml, partition files

    def on_round_end(self, run, record) -> bool:
        progress = {"round": record["round"], "accuracy": record.get("test_accuracy")}
        signature = self._checkpoint_signature()
        if self.tracker is not None and signature != self.checkpoint:
            self._ship(**progress)
        else:
            self.emit({"kind": PROGRESS, **progress})
        self.checkpoint = signature
        return False


def _sees_probe(probe: Optional[tuple[str, str]]) -> bool:
    if probe is None:
        return False
    path, token = probe
    try:
        return Path(path).read_text(encoding="utf-8") == token
    except OSError:
        return False


RUN_TEMP_PREFIX = "fedhet-run-"
RAY_TEMP_PREFIX = "fedhet-ray-"


def remote_run(request: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """One run of the sweep as a Ray generator task: yields ``started``, then ``progress`` /
    ``files`` messages, then one ``finished`` or ``failed`` message (module docstring).

    The run executes in a thread of the task so that the task can yield while it runs; the run's
    callbacks put the messages in a queue and this generator passes them on."""
    transfer = request["transfer"]
    shared = transfer == "shared" or (transfer == "auto" and _sees_probe(request.get("probe")))
    yield {"kind": STARTED, "node": socket.gethostname(), "pid": os.getpid(),
           "transfer": "shared" if shared else "files"}
    temporary = None
    try:
        if shared:
            run_dir = Path(request["run_dir"])
        else:
            # Tagged with this worker's PID: a task cancelled with force=True dies before its
            # `finally`, and the next task on the node removes what it left.
            remove_orphaned_temp_dirs(RUN_TEMP_PREFIX)
            temporary = owned_temp_dir(RUN_TEMP_PREFIX)
            run_dir = temporary / Path(request["run_dir"]).name
            run_dir.mkdir()
            if request.get("files") is not None:
                import ray
                write_run_files(run_dir, ray.get(request["files"]))
        messages: queue.Queue = queue.Queue()
        thread = threading.Thread(target=_execute, args=(request, run_dir, shared, messages.put),
                                  name=f"fedhet-run-{request['name']}", daemon=True)
        thread.start()
        while True:
            message = messages.get()
            yield message
            if message["kind"] in (FINISHED, RUN_FAILED):
                break
        thread.join()
    finally:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)


def _execute(request: dict[str, Any], run_dir: Path, shared: bool, emit) -> None:
    """Run (or resume) the run in ``run_dir``; ends by emitting the final message."""
    from fedhet.config import resolve_config
    from fedhet.error_lines import error_line, is_user_error

    pending: list[str] = []
    log_file = None

    def log(message: str) -> None:
        if log_file is not None:
            log_file.write(message + "\n")
            log_file.flush()
        else:
            pending.append(message)

    def send(message: dict[str, Any]) -> None:
        if pending:
            message["log"] = list(pending)
            pending.clear()
        emit(message)

    tracker = None if shared else ChangeTracker(run_dir, known=file_signatures(run_dir))
    threads = [f"run.threads={request['threads']}"]
    try:
        if shared:
            # Never through a planted link, hard link or FIFO (fedhet.core.log_files).
            log_file = append_log_text(run_dir / LOG_FILE)
        log(f"ray: {'resuming' if request['resume'] else 'starting'} on {socket.gethostname()} "
            f"(pid {os.getpid()}), run directory {'in place' if shared else 'shipped back from ' + str(run_dir)}")
        config = None
        if not request["resume"]:
            config = resolve_config(tomllib.loads(request["config_toml"])).with_overrides(
                {"run.threads": request["threads"]})
        summary = execute_run(config, run_dir, resume=request["resume"], resume_sets=threads,
                              callbacks=[_Reporter(send, tracker, run_dir)], log=log)
        final: dict[str, Any] = {"kind": FINISHED, "summary": summary}
    except Exception as error:  # the run's own failure: reported, not retried (as in a local sweep)
        log(error_line(error)[0] if is_user_error(error) else traceback.format_exc().rstrip())
        final = {"kind": RUN_FAILED, "error": f"{type(error).__name__}: {error}"}
    finally:
        if log_file is not None:
            log_file.close()
    try:
        if tracker is not None:
            final["files"], final["removed"] = tracker.changes()
    except Exception as error:  # noqa: BLE001 - the files are lost, the outcome must still arrive
        final = {"kind": RUN_FAILED, "error": f"shipping the run directory failed: {type(error).__name__}: {error}"}
    send(final)


# --- the sweep's side ------------------------------------------------------------------------


@contextlib.contextmanager
def ray_session(ray: Any, address: Optional[str]) -> Iterator[None]:
    """Connected to Ray for the block: the cluster at ``address``, the existing connection of this
    process, or a local Ray started (own temporary directory) and stopped here."""
    if ray.is_initialized():
        yield
        return
    if address:
        from fedhet.engine import RayClusterUnreachableError, check_reachable

        try:      # bounded: ray.init retries an address where no head answers for ever
            check_reachable(address, what="--ray-address")
        except RayClusterUnreachableError as error:
            raise SweepError(str(error)) from None
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
        except ConnectionError as error:
            raise SweepError(f"--ray-address {address}: cannot join a Ray cluster there ({error})") from None
        try:
            yield
        finally:
            ray.shutdown()
        return
    from fedhet.core import usable_cpus

    remove_orphaned_temp_dirs(RAY_TEMP_PREFIX)       # left by a driver killed before its `finally`
    temp_dir = str(owned_temp_dir(RAY_TEMP_PREFIX))
    try:
        # address="local": never join another cluster this machine happens to run.
        ray.init(address="local", num_cpus=usable_cpus(), _temp_dir=temp_dir, include_dashboard=False,
                 log_to_driver=False, configure_logging=False)
        try:
            yield
        finally:
            ray.shutdown()
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)


def check_bundle_fits(ray: Any, options: SweepOptions) -> None:
    """A run's bundle must fit on some live node, else its task would wait forever."""
    nodes = [node.get("Resources", {}) for node in ray.nodes() if node.get("Alive")]
    if not any(resources.get("CPU", 0) >= options.ray_cpus_per_run
               and resources.get("GPU", 0) >= options.ray_gpus_per_run for resources in nodes):
        largest = ", ".join(f"{r.get('CPU', 0):g} CPU / {r.get('GPU', 0):g} GPU" for r in nodes) or "no live node"
        raise SweepError(f"--ray-cpus-per-run {options.ray_cpus_per_run:g} / --ray-gpus-per-run "
                         f"{options.ray_gpus_per_run:g}: no node of the cluster has that much (nodes: {largest})")


@dataclasses.dataclass
class _Attempt:
    run: PlannedRun
    resume: bool
    number: int                                   # 1, 2, ... (system failures start a new attempt)
    lock: Optional[DirectoryLock] = None          # held while files are shipped into the run directory
    files_ref: Any = None                         # the resumed run's files in the object store

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None


class RaySweepExecutor:
    """Runs a sweep's pending runs as Ray tasks (module docstring); used by :func:`run_sweep`."""

    def __init__(self, plan: SweepPlan, options: SweepOptions, view: SweepProgress, poll_seconds: float = 0.5):
        self.plan, self.options, self.view, self.poll_seconds = plan, options, view, poll_seconds
        self.ray = import_ray()
        self.probe: Optional[tuple[str, str]] = None

    def run(self, todo: list[tuple[PlannedRun, str]]) -> list:
        with ray_session(self.ray, self.options.ray_address):
            check_bundle_fits(self.ray, self.options)
            self._write_probe()
            try:
                return self._run_all(todo)
            finally:
                if self.probe is not None:
                    Path(self.probe[0]).unlink(missing_ok=True)

    def _write_probe(self) -> None:
        if self.options.ray_transfer == "files":
            return
        path = (self.plan.out_dir / PROBE_NAME).resolve()
        token = secrets.token_hex(16)
        path.write_text(token, encoding="utf-8")
        self.probe = (str(path), token)

    def _submit(self, attempt: _Attempt):
        run = attempt.run
        if attempt.resume and self.options.ray_transfer != "shared":
            attempt.files_ref = self.ray.put(read_run_files(run.run_dir))
        from fedhet.config import config_to_toml

        request = {"name": run.name, "run_dir": str(run.run_dir.resolve()), "resume": attempt.resume,
                   "config_toml": None if attempt.resume else config_to_toml(run.config),
                   "transfer": self.options.ray_transfer, "probe": self.probe, "files": attempt.files_ref,
                   "threads": max(1, int(self.options.ray_cpus_per_run))}
        task = self.ray.remote(remote_run).options(
            num_cpus=self.options.ray_cpus_per_run, num_gpus=self.options.ray_gpus_per_run,
            max_retries=0, retry_exceptions=False, name=f"fedhet-sweep:{run.name}")
        return task.remote(request)

    def _run_all(self, todo: list[tuple[PlannedRun, str]]) -> list:
        ray = self.ray
        active: dict[Any, _Attempt] = {}
        outcomes = []
        try:
            for run, state in todo:
                attempt = _Attempt(run, resume=state == RESUME, number=1)
                active[self._submit(attempt)] = attempt
                self.view.update(run.name, note="queued on ray")
            while active:
                ready, _ = ray.wait(list(active), num_returns=1, timeout=self.poll_seconds)
                for generator in ready:
                    attempt = active[generator]
                    try:
                        message = ray.get(next(generator))
                    except StopIteration:
                        message = None
                    except ray.exceptions.RayTaskError as error:
                        # The task's own code raised (e.g. fedhet is not importable on that node): not retried.
                        del active[generator]
                        attempt.release()
                        cause = getattr(error, "cause", None) or error
                        self._finish(outcomes, self._failed(attempt.run, f"ray task error: {type(cause).__name__}: "
                                                                          f"{_first_line(cause)}"))
                        continue
                    except ray.exceptions.RayError as error:
                        del active[generator]
                        attempt.release()
                        retry = self._retry(attempt, f"{type(error).__name__}: {_first_line(error)}", outcomes)
                        if retry is not None:
                            active[self._submit(retry)] = retry
                        continue
                    if message is None:
                        del active[generator]
                        attempt.release()
                        self._finish(outcomes, self._failed(attempt.run, "the ray task ended without a result"))
                        continue
                    try:
                        outcome = self._handle(attempt, message)
                    except RunDirectoryInUseError as error:
                        # Someone else writes this run directory (a `fedhet run` of the user): this run
                        # fails, the others go on.
                        with contextlib.suppress(Exception):
                            ray.cancel(generator, force=True)
                        outcome = self._failed(attempt.run, str(error))
                    if outcome is not None:
                        del active[generator]
                        attempt.release()
                        self._finish(outcomes, outcome)
                self.view.tick()
        except BaseException:
            for generator, attempt in active.items():
                with contextlib.suppress(Exception):
                    ray.cancel(generator, force=True)
                attempt.release()
            raise
        return outcomes

    def _retry(self, attempt: _Attempt, reason: str, outcomes: list) -> Optional[_Attempt]:
        run = attempt.run
        if attempt.number >= self.options.ray_max_attempts:
            self._finish(outcomes, self._failed(run, f"lost {attempt.number} time(s) to the cluster, last: {reason}"))
            return None
        state, _conflict = run_state(run)
        append_log(run.run_dir, [f"ray: attempt {attempt.number} lost ({reason}); attempt {attempt.number + 1} "
                                 f"{'resumes from the last checkpoint' if state == RESUME else 'starts again'}"])
        if state == NEW:
            with DirectoryLock(run.run_dir):
                clear_run_directory(run.run_dir)          # a partial first shipment, no checkpoint yet
        self.view.update(run.name, note=f"attempt {attempt.number + 1}: {reason[:40]}")
        return _Attempt(run, resume=state == RESUME, number=attempt.number + 1)

    def _handle(self, attempt: _Attempt, message: dict[str, Any]):
        run, kind = attempt.run, message["kind"]
        if kind == STARTED:
            if message["transfer"] == "files":
                attempt.lock = DirectoryLock(run.run_dir)
                attempt.lock.acquire()
            where = f"{message['node']} ({message['transfer']})"
            self.view.update(run.name, RUNNING, note=("resumed on " if attempt.resume else "on ") + where)
            return None
        if "files" in message:
            write_run_files(run.run_dir, message["files"], message.get("removed", ()))
        append_log(run.run_dir, message.get("log", ()))
        if message.get("round") is not None:
            self.view.update(run.name, round=message["round"], accuracy=message.get("accuracy"))
        if kind == FINISHED:
            return RunOutcome(run, DONE, summary=read_summary(run.run_dir) or message["summary"])
        if kind == RUN_FAILED:
            return self._failed(run, message["error"])
        return None

    def _failed(self, run: PlannedRun, error: str):
        tail = tail_of(run.run_dir / LOG_FILE)
        return RunOutcome(run, FAILED, error=f"{error}; end of {run.run_dir / LOG_FILE}:\n{tail}" if tail else error)

    def _finish(self, outcomes: list, outcome) -> None:
        outcomes.append(outcome)
        show_outcome(self.view, outcome)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
