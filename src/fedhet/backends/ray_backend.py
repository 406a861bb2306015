"""The Ray backend (``run.backend = "ray"``): a round's clients run as Ray tasks on a pool of
actors, on one machine or on a Ray cluster, with bitwise the sequential backend's numbers
(docs/design.md, "Performance model"; the keys, data flow and fault rules in docs/ray.md).

Design:

- **Actors**: ``run.ray_actors`` actors (default: as many as the cluster's CPUs allow at
  ``run.ray_cpus_per_actor`` each), each reserving ``run.ray_cpus_per_actor`` CPUs and
  ``run.ray_gpus_per_actor`` GPUs, started at the first round and kept for the run. Each runs
  ``int(ray_cpus_per_actor)`` torch threads (at least one).
- **Data, once per run**: the training and test sets go into Ray's object store once
  (``ray.put`` of numpy views, which actors read zero-copy from shared memory on their node), and
  the model and the task's other parts once; every actor builds its task from them once, in its
  constructor (a backend reused for another task has its actors load that one instead).
- **Per round**: ``x``, the solver's broadcast and the solver itself (a few options) go out in one
  ``ray.put``; each client is one actor call carrying its own rows of the per-client states (a few
  vectors) and the reference to the round's object, which an actor fetches once per round. The
  call returns the client's delta, new states, step count, loss and extras.
- **Same numbers**: an actor trains its client with the sequential backend's own code
  (:class:`~fedhet.backends.sequential.SequentialBackend` on a one-client cohort, as the processes
  backend's workers do); each client's computation depends only on ``(x, its states, broadcast,
  seed, round, client id)``, so who runs it cannot change a bit (with one torch thread per actor,
  the default).
- **Dynamic scheduling**: clients are handed out longest planned work first (steps x batch size,
  as in :func:`fedhet.backends.processes.claim_order`), at most two outstanding per actor, and the
  next client goes to whichever actor finishes first: a slow or busy node takes fewer clients.
- **Faults**: an actor that dies (its process killed, its node lost) fails its outstanding calls;
  those clients go back to the queue and run on another actor, the dead actor is replaced, and the
  round's result is the one an undisturbed round gives. A client may be retried ``run.ray_retries``
  times per round; when that budget is exhausted, or no actor is left and none can be started
  within ``run.ray_start_timeout``, :class:`RayWorkersLostError` stops the run (the runner leaves
  the last checkpoint as it was). An actor that returns nothing for ``run.ray_call_timeout`` while
  it holds calls (stopped, hung: alive to Ray) is killed and handled like a dead one, and losing
  Ray itself (its raylet, the head node) is a :class:`RayWorkersLostError` too. An exception raised by the client code itself is a
  bug, not a fault: it is re-raised with the actor's traceback, never retried.
- **Evaluation**: :meth:`RayBackend.evaluate` splits the test set's forward passes across the actors
  and adds the per-pass sums in pass order in the driver, as :func:`fedhet.core.task.evaluate`
  adds them (same numbers); the validation split and per-client evaluation stay in the driver.
- **Ray itself**: ``run.ray_address`` (``"auto"`` or ``host:port``) joins a running cluster, whose
  nodes must have fedhet and torch installed; without it the backend starts a private local Ray
  (``address="local"``, its own temporary directory, no dashboard, quiet logs) and shuts it down in
  :meth:`RayBackend.close`. A Ray already initialised in this process (by the caller) is used as it
  is and left running.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import shutil
import socket
import time
import warnings
from typing import Any, Callable, Optional

import numpy as np
import torch

from fedhet.backends.base import RoundWork, client_plan, cohort_sizes
from fedhet.backends.ray_watch import (
    RayLivenessWatch,
    RayWorkersLostError,
    child_processes_named,
    gcs_check,
    quiet_raylet_death_dump,
    raylet_check,
    raylet_reason,
)
from fedhet.backends.sequential import SequentialBackend
from fedhet.client.base import LocalSolver
from fedhet.core.cohort import Cohort
from fedhet.core.dataset import TensorDataset
from fedhet.core.machine import usable_cpus
from fedhet.core.task import FederatedTask, combine_passes, eval_pass_size, eval_passes, evaluate_passes
from fedhet.core.tempdirs import owned_temp_dir, remove_orphaned_temp_dirs
from fedhet.errors import FedhetError

logger = logging.getLogger(__name__)

# A replacement actor (a new worker process that maps the data and unpickles the model) starts in
# about a second on an idle machine; this long means the cluster has no room for it
# (run.ray_start_timeout's default).
ACTOR_START_TIMEOUT_SECONDS = 120.0
# An actor that returned nothing for this long while it held calls is stopped (SIGSTOP), hung or
# unreachable, not slow: a client of the small models fedhet trains takes seconds
# (run.ray_call_timeout's default).
CALL_TIMEOUT_SECONDS = 600.0
# Outstanding calls per actor: the second hides the round trip between two clients.
CALLS_PER_ACTOR = 2
# How long to wait for a TCP connection to a cluster's address before saying nothing answers there.
CONNECT_TIMEOUT_SECONDS = 5.0


# Resident memory of one actor process (a Ray worker with torch imported and the task mapped): 12
# actors of a small MLP measured 3.0 GB together, about 250 MB each.
ACTOR_PROCESS_BYTES = 250 * 10**6


class RayActorsTooManyError(FedhetError, MemoryError):
    """More local actors than this machine's free memory holds."""


def check_local_actors_fit(actors: int, available: Optional[int] = None) -> None:
    """Refuse ``run.ray_actors`` local actors whose processes alone exceed the free memory (the local Ray
    gets ``num_cpus = actors``, so nothing else limits them)."""
    from fedhet.core.memory import available_memory

    available = available_memory() if available is None else available
    need = actors * ACTOR_PROCESS_BYTES
    if available is not None and need > available:
        raise RayActorsTooManyError(
            f"run.ray_actors = {actors}: about {need / 1e9:.1f} GB for {actors} actor processes (about "
            f"{ACTOR_PROCESS_BYTES / 1e6:.0f} MB each), more than the {available / 1e9:.1f} GB of free memory; "
            "use fewer actors")


class RayStartError(FedhetError, RuntimeError):
    """A private local Ray did not start (its node timed out during startup, ...)."""


class RayClusterUnreachableError(FedhetError, ConnectionError):
    """``run.ray_address`` names no running Ray cluster."""


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise FedhetError("run.backend = 'ray' needs Ray, which is not installed: pip install 'fedhet[ray]'") from None
    return ray


@dataclasses.dataclass(frozen=True)
class RaySettings:
    """The ``run.ray_*`` keys (docs/ray.md)."""

    address: Optional[str] = None          # None: a private local Ray
    actors: Optional[int] = None           # None: as many as the CPUs (and GPUs) allow
    cpus_per_actor: float = 1.0
    gpus_per_actor: float = 0.0
    retries: int = 3                       # per client per round
    start_timeout: float = ACTOR_START_TIMEOUT_SECONDS   # an actor (or a replacement) must start within this
    call_timeout: float = CALL_TIMEOUT_SECONDS           # an actor silent this long with calls outstanding is lost

    @classmethod
    def from_run_options(cls, run: Any) -> "RaySettings":
        return cls(address=run.ray_address, actors=run.ray_actors, cpus_per_actor=run.ray_cpus_per_actor,
                   gpus_per_actor=run.ray_gpus_per_actor, retries=run.ray_retries,
                   start_timeout=run.ray_start_timeout, call_timeout=run.ray_call_timeout)


# --- moving tensors through the object store --------------------------------------------------------

def to_wire(tensor: torch.Tensor) -> Any:
    """A CPU tensor as Ray moves it best: a numpy array (sent out of band and read zero-copy from the
    object store) where numpy has the dtype, else the tensor itself (e.g. bfloat16)."""
    tensor = tensor.detach().cpu()
    try:
        return tensor.numpy()
    except TypeError:
        return tensor


def from_wire(value: Any) -> torch.Tensor:
    """A tensor viewing what :func:`to_wire` sent. Arrays from the object store are read-only; the
    tensors made from them are only ever read (gathered from, copied out of)."""
    if isinstance(value, torch.Tensor):
        return value
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not writable.*")
        return torch.from_numpy(value)


def task_skeleton(task: FederatedTask) -> FederatedTask:
    """``task`` without its data (sent separately, zero-copy): model, spec, offsets, transform."""
    empty = TensorDataset(task.train.inputs[:0].cpu().clone(), task.train.targets[:0].cpu().clone())
    return dataclasses.replace(task, train=empty, test=empty, device=torch.device("cpu"))


# --- the actor ------------------------------------------------------------------------------------

class RayFailedInActorError(RuntimeError):
    """Ray itself failed under an actor (its raylet or the object's owner gone): a lost actor to the
    driver, not an error of the client code."""


def _get_in_actor(ref: Any) -> Any:
    """``ray.get`` in an actor, its failures marked as Ray's (:class:`RayFailedInActorError`): a killed
    raylet makes it raise ``OSError: Broken pipe``, which the driver must not take for a bug."""
    ray = import_ray()
    try:
        return ray.get(ref)
    except (OSError, ray.exceptions.RayError) as error:
        raise RayFailedInActorError(f"{type(error).__name__}: {_first_line(error)}") from None


class ClientActor:
    """One worker of the pool: the task (data viewed from the object store, model built once per
    task) training the clients it is sent with the sequential backend's code."""

    def __init__(self, skeleton: FederatedTask, data: dict[str, Any], threads: int, device: str):
        torch.set_num_threads(max(1, threads))
        self.device = torch.device(device)
        self.backend = SequentialBackend()
        self.round_key: Optional[str] = None
        self.round_data: Any = None
        self.load(skeleton, data)

    def load(self, skeleton: FederatedTask, data: dict[str, Any]) -> None:
        """Serve another task (a backend reused across tasks keeps its actors)."""
        def place(name: str) -> torch.Tensor:
            return from_wire(data[name]).to(self.device)

        train = TensorDataset(place("train_inputs"), place("train_targets"))
        test = TensorDataset(place("test_inputs"), place("test_targets"))
        self.task = dataclasses.replace(skeleton, model=skeleton.model.to(self.device), train=train, test=test,
                                        device=self.device)
        self.round_key, self.round_data = None, None

    def pid(self) -> int:
        import os
        return os.getpid()

    def _round(self, holder: list) -> tuple[torch.Tensor, dict[str, torch.Tensor], LocalSolver]:
        """The round's ``(x, broadcast, solver)``, fetched once per round (the reference comes inside
        a list, so that Ray does not fetch it again for every call)."""
        ref = holder[0]
        if self.round_key != ref.hex():
            params, broadcast, solver = _get_in_actor(ref)
            device = self.task.device
            self.round_data = (from_wire(params).to(device).clone(),
                               {name: from_wire(value).to(device).clone() for name, value in broadcast.items()},
                               solver)
            self.round_key = ref.hex()
        return self.round_data

    def train(self, holder: list, round_index: int, seed: int, learning_rate: float, client_id: int,
              states: dict[str, Any], step_limit: Optional[int] = None) -> tuple:
        params, broadcast, solver = self._round(holder)
        work = RoundWork(round_index=round_index, seed=seed, params=params,
                         client_ids=torch.tensor([client_id], dtype=torch.int64),
                         client_states={name: from_wire(value).to(self.task.device) for name, value in states.items()},
                         broadcast=broadcast, learning_rate=learning_rate,
                         step_limits=None if step_limit is None else {client_id: step_limit})
        cohort, new_states = self.backend.train_cohort(self.task, solver, work)
        return (to_wire(cohort.deltas[0]), int(cohort.local_steps[0]), float(cohort.train_loss[0]),
                {name: to_wire(value[0]) for name, value in cohort.extras.items()},
                {name: to_wire(value[0]) for name, value in new_states.items()})

    def evaluate(self, holder: list, passes: list[tuple[int, int]]) -> tuple[list[float], list[int]]:
        params = from_wire(_get_in_actor(holder[0])).to(self.task.device)
        loss_sums, correct = evaluate_passes(self.task, params, passes)
        return loss_sums.tolist(), correct.tolist()


# --- the driver side ------------------------------------------------------------------------------

# The HTTP/2 client preface and an empty SETTINGS frame: a Ray head's GCS is a gRPC (HTTP/2) server,
# which answers with its own SETTINGS frame (RFC 9113, section 3.4).
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
_HTTP2_SETTINGS = 0x04


def check_reachable(address: str, what: str = "run.ray_address") -> None:
    """Raise :class:`RayClusterUnreachableError` within about :data:`CONNECT_TIMEOUT_SECONDS` when no
    Ray head answers at ``host:port``: nothing listens there, or what listens does not speak gRPC
    (``ray.init`` would retry for minutes, or forever: Ray rewrites a loopback address to the
    machine's own before dialling, so a listener on 127.0.0.1 that is not Ray makes it retry an
    address where nothing listens). ``what`` names
    the setting in the message (``run.ray_address``, ``--ray-address``)."""
    if address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":")
    hint = ("start one with `ray start --head`, or leave it unset for a local Ray")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=CONNECT_TIMEOUT_SECONDS) as sock:
            sock.sendall(_HTTP2_PREFACE)
            reply = _receive(sock, 9)
    except (OSError, ValueError) as error:
        raise RayClusterUnreachableError(
            f"{what} = {address!r}: no Ray cluster answers there ({error}); {hint}") from None
    if len(reply) < 9 or reply[3] != _HTTP2_SETTINGS:
        raise RayClusterUnreachableError(
            f"{what} = {address!r}: something listens there but it is not a Ray head (no gRPC answer within "
            f"{CONNECT_TIMEOUT_SECONDS:g} s); give the head's GCS port (6379 by default), or {hint}")


def _receive(sock: socket.socket, count: int) -> bytes:
    """Up to ``count`` bytes, fewer when the peer closes first; a silent peer times out (OSError)."""
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            break
        data += chunk
    return data


class RaySession:
    """This process's connection to Ray: a private local instance it started (and shuts down), or a
    cluster or instance someone else started (left running)."""

    def __init__(self, address: Optional[str], num_cpus: int, num_gpus: float):
        ray = import_ray()
        self.owned = False
        self.temp_dir: Optional[str] = None
        self.watch: Optional[RayLivenessWatch] = None
        self._restore_printer: Callable[[], None] = lambda: None
        if ray.is_initialized():
            return
        quiet = dict(logging_level=logging.WARNING, log_to_driver=False, include_dashboard=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)   # Ray's accelerator-env-var notice
            if address is None:
                # address="local": a bare ray.init() may join another cluster on this machine.
                # Named after this process: a later run removes it if this one is killed.
                remove_orphaned_temp_dirs("fedhet-ray-")
                self.temp_dir = str(owned_temp_dir("fedhet-ray-"))
                try:
                    ray.init(address="local", num_cpus=num_cpus, num_gpus=num_gpus, _temp_dir=self.temp_dir,
                             **quiet)
                except Exception as error:  # noqa: BLE001  (Ray raises bare Exception when its node times out)
                    self._shutdown_quietly(ray)
                    shutil.rmtree(self.temp_dir, ignore_errors=True)
                    self.temp_dir = None
                    raise RayStartError(
                        f"could not start a local Ray with {num_cpus} CPU(s) ({_first_line(error)}); the machine "
                        "may be too busy or too small for that many worker processes: lower run.ray_actors "
                        "(or run.threads), or join a cluster with run.ray_address") from None
            else:
                check_reachable(address)
                try:
                    ray.init(address=address, **quiet)
                except (ConnectionError, RuntimeError, ValueError) as error:
                    raise RayClusterUnreachableError(
                        f"run.ray_address = {address!r}: could not join a Ray cluster there: "
                        f"{str(error).splitlines()[0] if str(error) else type(error).__name__}") from None
        self.owned = True
        self.watch = self._start_watch(ray, address)

    def _start_watch(self, ray: Any, address: Optional[str]) -> Optional[RayLivenessWatch]:
        """Watch the processes this driver cannot outlive (:mod:`fedhet.backends.ray_watch`): a
        private Ray's raylet and GCS (children of this process), or a joined cluster's GCS."""
        def cleanup() -> None:
            if self.temp_dir is not None:
                shutil.rmtree(self.temp_dir, ignore_errors=True)

        sentinel_for = None
        if address is None:
            raylets = child_processes_named("raylet")
            pids = raylets + child_processes_named("gcs_server")
            if not raylets:
                return None          # not Linux (no /proc), or Ray runs them elsewhere: nothing to watch
            checks = [raylet_check(pid) for pid in pids]
            sentinel_for = (raylets[0], raylet_reason(raylets[0]))

            def check() -> Optional[str]:
                return next((reason for reason in (one() for one in checks) if reason is not None), None)
        else:
            try:
                check = gcs_check(ray.get_runtime_context().gcs_address)
            except Exception:  # noqa: BLE001  (a Ray without the address: no watch, Ray's own handling)
                return None
        watch = RayLivenessWatch(check, cleanup=cleanup, sentinel_for=sentinel_for)
        self._restore_printer = quiet_raylet_death_dump(ray)     # the watch's line replaces Ray's dump
        return watch

    @staticmethod
    def _shutdown_quietly(ray: Any) -> None:
        """Stop what a failed ``ray.init`` may have started (its GCS, raylet, log monitor)."""
        try:
            ray.shutdown()
        except Exception:  # noqa: BLE001  (nothing more can be done about a Ray that did not start)
            pass

    def close(self) -> None:
        if self.watch is not None:
            self.watch.stop()        # first: ray.shutdown stops the raylet on purpose
            self.watch = None
            self._restore_printer()
        if self.owned:
            import ray
            ray.shutdown()
            self.owned = False
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
            self.temp_dir = None


@dataclasses.dataclass
class ActorSlot:
    """A place in the pool: its current actor, that actor's outstanding calls, and a generation
    that a replacement increments (so late failures of the dead actor's calls are recognised)."""

    handle: Any
    outstanding: int = 0
    alive: bool = True
    generation: int = 0
    last_progress: float = 0.0     # time.monotonic() of its last result, or of its first call since idle


class ActorPool:
    """The actors of a backend and the object-store references of the task they serve."""

    def __init__(self, task: FederatedTask, settings: RaySettings, size: int):
        ray = import_ray()
        self.settings = settings
        self.remote_class = ray.remote(num_cpus=settings.cpus_per_actor, num_gpus=settings.gpus_per_actor,
                                       max_restarts=0, max_task_retries=0)(ClientActor)
        self._put(task)
        self.slots = [ActorSlot(self._start()) for _ in range(size)]
        self.replaced = 0
        self.wait_until_ready([slot.handle for slot in self.slots])

    def _put(self, task: FederatedTask) -> None:
        """The task into the object store, once: its data as numpy arrays (read zero-copy by the
        actors on each node) and the rest (model, offsets, transform) pickled."""
        ray = import_ray()
        self.task = task
        self.data_ref = ray.put({"train_inputs": to_wire(task.train.inputs), "train_targets": to_wire(task.train.targets),
                                 "test_inputs": to_wire(task.test.inputs), "test_targets": to_wire(task.test.targets)})
        self.skeleton_ref = ray.put(task_skeleton(task))

    def load(self, task: FederatedTask) -> None:
        """Have every live actor serve ``task`` instead (no new processes)."""
        self._put(task)
        ray = import_ray()
        live = self.live()
        try:
            ray.get([slot.handle.load.remote(self.skeleton_ref, self.data_ref) for slot in live])
        except ray.exceptions.RayActorError:
            for slot in live:
                if not _responds(slot.handle, self.settings.start_timeout):
                    self.replace(slot)      # started with the new task's references

    def _start(self) -> Any:
        device = "cuda" if self.task.device.type == "cuda" else "cpu"
        # Top-level references: Ray hands the actor the objects (the data zero-copy), fetched on its node.
        return self.remote_class.remote(self.skeleton_ref, self.data_ref, int(self.settings.cpus_per_actor), device)

    def wait_until_ready(self, handles: list[Any]) -> None:
        ray = import_ray()
        try:
            ray.get([handle.pid.remote() for handle in handles], timeout=self.settings.start_timeout)
        except ray.exceptions.GetTimeoutError:
            self.close()
            raise RayWorkersLostError(f"ray backend: {len(handles)} actor(s) of {self.settings.cpus_per_actor:g} CPU(s) "
                                      f"and {self.settings.gpus_per_actor:g} GPU(s) did not start within "
                                      f"run.ray_start_timeout = {self.settings.start_timeout:g} s: the cluster lacks "
                                      f"the resources (lower run.ray_actors or the per-actor resources)") from None
        except ray.exceptions.RayError as error:
            self.close()
            raise RayWorkersLostError(f"ray backend: the actors failed to start: {_first_line(error)}") from None

    def replace(self, slot: ActorSlot) -> bool:
        """Start a new actor in a dead actor's slot; False when none starts in time."""
        ray = import_ray()
        try:
            ray.kill(slot.handle, no_restart=True)
        except Exception:  # noqa: BLE001  (it is dead already)
            pass
        handle = self._start()
        try:
            ray.get(handle.pid.remote(), timeout=self.settings.start_timeout)
        except (ray.exceptions.GetTimeoutError, ray.exceptions.RayError):
            try:
                ray.kill(handle, no_restart=True)
            except Exception:  # noqa: BLE001
                pass
            slot.alive = False
            return False
        slot.handle, slot.outstanding, slot.alive = handle, 0, True
        slot.generation += 1
        self.replaced += 1
        return True

    def live(self) -> list[ActorSlot]:
        return [slot for slot in self.slots if slot.alive]

    def close(self) -> None:
        ray = import_ray()
        if not ray.is_initialized():
            return
        for slot in self.slots:
            try:
                ray.kill(slot.handle, no_restart=True)
            except Exception:  # noqa: BLE001  (already dead or gone with its node)
                pass
        self.slots = []


def _responds(handle: Any, timeout: float = ACTOR_START_TIMEOUT_SECONDS) -> bool:
    ray = import_ray()
    try:
        ray.get(handle.pid.remote(), timeout=timeout)
        return True
    except ray.exceptions.RayError:
        return False


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def claim_order(costs: list[int]) -> list[int]:
    """Cohort positions largest planned work first (ties by position): the longest-processing-time
    rule, as the processes backend claims them."""
    return sorted(range(len(costs)), key=lambda k: (-costs[k], k))


class RayBackend:
    """Clients of a cohort trained as Ray tasks on a pool of actors; see the module docstring."""

    name = "ray"

    def __init__(self, settings: RaySettings = RaySettings(), *, threads: Optional[int] = None,
                 connect: bool = False):
        """``threads`` (``run.threads``) caps the CPUs of a local Ray this backend starts.
        ``connect``: join (or start) Ray now, so that a wrong ``run.ray_address`` is reported
        before any round; else at the first round. The actors start at the first round."""
        import_ray()        # a missing extra is reported at selection, before any work
        self.settings = settings
        self.threads = threads
        self._session: Optional[RaySession] = None
        self._pool: Optional[ActorPool] = None
        # Called in the driver with each client's cohort position as its result arrives (tests use
        # it to disturb a round in flight; a progress display could too).
        self.on_client_done: Optional[Callable[[int], None]] = None
        self._lost_hint: Optional[str] = None
        if connect:
            self._connect()

    def set_lost_hint(self, hint: str) -> None:
        """What to add to the line printed when Ray itself is lost mid-run (the run's resume command)."""
        self._lost_hint = hint
        if self._session is not None and self._session.watch is not None:
            self._session.watch.hint = hint

    # -- lifecycle --

    def _connect(self) -> None:
        if self._session is not None:
            return
        settings = self.settings
        cpus = usable_cpus(self.threads)
        if settings.actors is not None:
            cpus = max(cpus, int(np.ceil(settings.actors * settings.cpus_per_actor)))
        gpus = float(torch.cuda.device_count()) if settings.gpus_per_actor > 0 else 0.0
        if settings.address is None and settings.actors is not None and not import_ray().is_initialized():
            # A local Ray started with num_cpus = run.ray_actors starts about that many worker
            # processes at once: on a small machine its node startup times out before any actor
            # exists, so the memory check must come before Ray starts, not at the first round.
            check_local_actors_fit(settings.actors)
        self._session = RaySession(settings.address, num_cpus=cpus, num_gpus=gpus)
        if self._session.watch is not None:
            self._session.watch.hint = self._lost_hint

    def pool_size(self) -> int:
        """Actors to start: ``run.ray_actors``, else as many as the cluster's CPUs (and GPUs) allow."""
        if self.settings.actors is not None:
            return self.settings.actors
        ray = import_ray()
        resources = ray.cluster_resources()
        size = int(resources.get("CPU", 1) // self.settings.cpus_per_actor)
        if self.settings.gpus_per_actor > 0:
            size = min(size, int(resources.get("GPU", 0) // self.settings.gpus_per_actor))
        return max(1, size)

    def _pool_for(self, task: FederatedTask) -> ActorPool:
        pool = self._pool
        if pool is None:
            self._connect()
            size = self.pool_size()
            if self._session is not None and self._session.temp_dir is not None:   # a local Ray we started
                check_local_actors_fit(size)
            pool = self._pool = ActorPool(task, self.settings, size)
        elif pool.task is not task:
            pool.load(task)
        return pool

    def actor_pids(self) -> list[int]:
        """Process ids of the live actors (on their nodes)."""
        ray = import_ray()
        if self._pool is None:
            return []
        return ray.get([slot.handle.pid.remote() for slot in self._pool.live()])

    def close(self) -> None:
        """Stop the actors, and the local Ray when this backend started it."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._session is not None:
            self._session.close()
            self._session = None

    # -- training --

    def train_cohort(self, task: FederatedTask, solver: LocalSolver,
                     work: RoundWork) -> tuple[Cohort, dict[str, torch.Tensor]]:
        num_clients = int(work.client_ids.numel())
        if num_clients == 0:
            return SequentialBackend().train_cohort(task, solver, work)
        ray = import_ray()
        pool = self._pool_for(task)
        client_ids = work.client_ids.tolist()
        plans = [client_plan(task, solver.options, work, client_id) for client_id in client_ids]
        pending = collections.deque(claim_order([plan.num_steps * plan.batch_size for plan in plans]))
        # The round's one object: x, the solver's broadcast, and the solver itself (a few options).
        holder = [ray.put((to_wire(work.params), {name: to_wire(value) for name, value in work.broadcast.items()},
                           solver))]
        states = {name: rows.detach().cpu() for name, rows in work.client_states.items()}
        results: list[Optional[tuple]] = [None] * num_clients
        attempts = [0] * num_clients
        lost: list[str] = []
        outstanding: dict[Any, tuple[ActorSlot, int, int]] = {}   # ref -> (slot, its generation, position)

        def submit(slot: ActorSlot, position: int) -> None:
            # [1, ...] rows of a one-client cohort; clone(): a view would send the whole table.
            rows = {name: to_wire(values[position:position + 1].clone()) for name, values in states.items()}
            limit = None if work.step_limits is None else work.step_limits.get(client_ids[position])
            ref = slot.handle.train.remote(holder, work.round_index, work.seed, work.learning_rate,
                                           client_ids[position], rows, limit)
            outstanding[ref] = (slot, slot.generation, position)
            if slot.outstanding == 0:
                slot.last_progress = time.monotonic()
            slot.outstanding += 1

        try:
            while pending or outstanding:
                for slot in pool.live():
                    while pending and slot.outstanding < CALLS_PER_ACTOR:
                        submit(slot, pending.popleft())
                if not outstanding:
                    raise RayWorkersLostError(
                        f"ray backend: no actor is left to train round {work.round_index + 1}'s "
                        f"{len(pending)} remaining client(s) and none could be started ({'; '.join(lost[-3:])})")
                done, _ = ray.wait(list(outstanding), num_returns=1, timeout=self._wait_budget(pool))
                if not done:
                    self._drop_stalled(pool, outstanding, client_ids, attempts, pending, lost, work)
                    continue
                for ref in done:
                    self._receive(pool, ref, outstanding, results, client_ids, attempts, pending, lost, work)
        except BaseException as error:
            self._cancel_outstanding(outstanding)
            if isinstance(error, (OSError, ray.exceptions.RaySystemError)):
                # Ray itself went away under the driver (its raylet or the head node killed): one line
                # rather than "Broken pipe" or Ray's own dump; the runner adds that the last checkpoint
                # is intact and how to resume.
                raise RayWorkersLostError(f"ray backend: the connection to Ray was lost in round "
                                          f"{work.round_index + 1} ({type(error).__name__}: {_first_line(error)}); "
                                          "its raylet or head node stopped") from None
            raise
        return self._assemble(task, work, results, states)

    def _receive(self, pool: ActorPool, ref: Any, outstanding: dict, results: list, client_ids: list[int],
                 attempts: list[int], pending: collections.deque, lost: list[str], work: RoundWork) -> None:
        """Take one finished call: its client's result, or its actor lost and the client requeued; a
        client that raised fails the round."""
        ray = import_ray()
        slot, generation, position = outstanding.pop(ref)
        current = generation == slot.generation
        if current:
            slot.outstanding -= 1
            slot.last_progress = time.monotonic()
        try:
            results[position] = ray.get(ref)
        except ray.exceptions.RayTaskError as error:
            if isinstance(getattr(error, "cause", None), RayFailedInActorError):
                # Ray failed under the actor (its raylet gone): the actor is lost.
                self._actor_lost(pool, slot if current else None, position, client_ids, attempts,
                                 pending, lost, error.cause, work)
                return
            # The client code raised: a bug or bad input, the same on any actor.
            raise RuntimeError(f"ray backend: client {client_ids[position]} failed on its actor:\n"
                               f"{error}") from None
        except ray.exceptions.RayError as error:
            self._actor_lost(pool, slot if current else None, position, client_ids, attempts, pending,
                             lost, error, work)
            return
        if self.on_client_done is not None:
            self.on_client_done(position)

    @staticmethod
    def _cancel_outstanding(outstanding: dict) -> None:
        """A round that ends early leaves calls in flight whose results no one will read: cancel them
        and free their slots for the next round (a resumed run may reuse this backend)."""
        ray = import_ray()
        for ref, (slot, generation, _) in outstanding.items():
            if generation == slot.generation:
                slot.outstanding = max(0, slot.outstanding - 1)
            try:
                ray.cancel(ref, force=False)
            except Exception:  # noqa: BLE001
                pass

    def _wait_budget(self, pool: ActorPool) -> float:
        """Seconds until the first busy actor has been silent for ``run.ray_call_timeout``."""
        busy = [slot.last_progress for slot in pool.live() if slot.outstanding > 0]
        if not busy:
            return self.settings.call_timeout
        return max(0.0, min(busy) + self.settings.call_timeout - time.monotonic())

    def _drop_stalled(self, pool: ActorPool, outstanding: dict, client_ids: list[int], attempts: list[int],
                      pending: collections.deque, lost: list[str], work: RoundWork) -> None:
        """Treat every actor silent for ``run.ray_call_timeout`` with calls outstanding as lost: a
        stopped (SIGSTOP) or hung process is alive to Ray and would stall the round forever. It is
        killed, its clients are requeued like those of a dead actor (the same numbers on
        another actor) and it is replaced."""
        ray = import_ray()
        now = time.monotonic()
        for slot in pool.live():
            if slot.outstanding == 0 or now - slot.last_progress < self.settings.call_timeout:
                continue
            reason = RuntimeError(f"its actor returned nothing for run.ray_call_timeout = "
                                  f"{self.settings.call_timeout:g} s (stopped or hung); it was killed")
            logger.warning("ray backend: round %d: an actor returned nothing for %g s; killing it and running its "
                           "clients on another", work.round_index + 1, self.settings.call_timeout)
            for ref, (owner, generation, position) in list(outstanding.items()):
                if owner is slot and generation == slot.generation:
                    del outstanding[ref]
                    try:
                        ray.cancel(ref, force=True)
                    except Exception:  # noqa: BLE001  (its actor is being killed anyway)
                        pass
                    self._actor_lost(pool, None, position, client_ids, attempts, pending, lost, reason, work)
            slot.alive = False
            pool.replace(slot)         # kills the stalled actor first; a new one in its place

    def _actor_lost(self, pool: ActorPool, slot: Optional[ActorSlot], position: int, client_ids: list[int],
                    attempts: list[int], pending: collections.deque, lost: list[str], error: BaseException,
                    work: RoundWork) -> None:
        """Requeue the client of a failed call, and replace its actor (``slot``; None when the
        failed call was to an actor that has been replaced already)."""
        attempts[position] += 1
        lost.append(f"client {client_ids[position]}: {_first_line(error)}")
        if attempts[position] > self.settings.retries:
            raise RayWorkersLostError(
                f"ray backend: client {client_ids[position]} of round {work.round_index + 1} was lost with its actor "
                f"{attempts[position]} time(s), more than run.ray_retries = {self.settings.retries} allows "
                f"(last: {_first_line(error)})")
        pending.appendleft(position)        # first in line: it was among the longest
        if slot is not None and slot.alive:
            slot.alive = False
            # Its other outstanding calls fail too and are requeued as they come back.
            pool.replace(slot)

    def _assemble(self, task: FederatedTask, work: RoundWork, results: list, states: dict[str, torch.Tensor]):
        num_clients = len(results)
        deltas = torch.empty(num_clients, task.spec.dim, dtype=task.dtype, device=task.device)
        steps = torch.empty(num_clients, dtype=torch.int64)
        losses = torch.empty(num_clients, dtype=torch.float64)
        extras: dict[str, torch.Tensor] = {}
        new_states: dict[str, torch.Tensor] = {}
        for position, (delta, step_count, loss, client_extras, client_states) in enumerate(results):
            deltas[position] = from_wire(delta)
            steps[position] = step_count
            losses[position] = loss
            for table, row in ((extras, client_extras), (new_states, client_states)):
                for name, value in row.items():
                    value = from_wire(value)
                    if name not in table:
                        table[name] = torch.empty((num_clients, *value.shape), dtype=value.dtype)
                    table[name][position] = value
        if set(new_states) != set(states):
            raise RuntimeError(f"ray backend: the solver returned client states {sorted(new_states)}, "
                               f"expected {sorted(states)} (its client_state_names)")
        cohort = Cohort(client_ids=work.client_ids, deltas=deltas, num_examples=cohort_sizes(task, work.client_ids),
                        local_steps=steps, train_loss=losses, extras=extras)
        return cohort, new_states

    # -- evaluation --

    def evaluate(self, task: FederatedTask, params: torch.Tensor, *, batch_size: int) -> tuple[float, float]:
        """The engine's evaluation with its forward passes split across the actors (same numbers:
        the per-pass sums are added in pass order here). Before the first round, or for a task
        the actors do not hold, it evaluates in the driver."""
        passes = eval_passes(len(task.test), eval_pass_size(task, params, batch_size))
        pool = self._pool
        if pool is None or pool.task is not task or len(passes) < 2 or not pool.live():
            loss_sums, correct = evaluate_passes(task, params, passes)
            return combine_passes(loss_sums, correct, len(task.test))
        ray = import_ray()
        slots = pool.live()
        parts = min(len(slots), len(passes))
        bounds = [round(i * len(passes) / parts) for i in range(parts + 1)]
        holder = [ray.put(to_wire(params))]
        try:
            replies = ray.get([slots[i].handle.evaluate.remote(holder, passes[bounds[i]:bounds[i + 1]])
                               for i in range(parts)])
        except ray.exceptions.RayTaskError as error:
            if not isinstance(getattr(error, "cause", None), RayFailedInActorError):
                raise
            # Ray failed under an actor: evaluate here (same numbers); training replaces it.
            loss_sums, correct = evaluate_passes(task, params, passes)
            return combine_passes(loss_sums, correct, len(task.test))
        except ray.exceptions.RayActorError:
            # An actor lost between rounds: evaluate here (same numbers); training replaces it.
            loss_sums, correct = evaluate_passes(task, params, passes)
            return combine_passes(loss_sums, correct, len(task.test))
        except (OSError, ray.exceptions.RaySystemError) as error:
            raise RayWorkersLostError(f"ray backend: the connection to Ray was lost while evaluating "
                                      f"({type(error).__name__}: {_first_line(error)}); its raylet or head node "
                                      "stopped") from None
        loss_sums = torch.tensor([value for reply in replies for value in reply[0]], dtype=torch.float64)
        correct = torch.tensor([value for reply in replies for value in reply[1]], dtype=torch.int64)
        return combine_passes(loss_sums, correct, len(task.test))

