"""Picking an execution backend from ``run.backend``, and saying why.

``auto`` (the default) picks, in order:

1. on a GPU (any non-CPU device): ``vectorized``, which turns the cohort's many small per-client
   kernels into a few large ones; ``sequential`` when the model or solver cannot be vectorised
   exactly (dropout, batch-norm statistics, a solver that opts out; the reason is given);
2. on a CPU with at least two usable cores (the process's affinity mask, capped by
   ``run.threads``) and a model big enough that a local step outweighs a message to a worker
   (``d x B >= PROCESS_MIN_STEP_WORK``): ``processes``, one single-threaded process per core (this
   one and forked workers);
3. otherwise ``sequential`` (one core, or a model so small that the messages would dominate).

``ray`` is never picked by ``auto``: it runs on this machine or a cluster (``run.ray_address``) and
is chosen explicitly, with its resources (``run.ray_*``) stated in the config (docs/ray.md).

The vectorised backend is never picked on a CPU: with one thread a vmap over clients is no faster
than the loop (benchmarks/README.md has the measurement), and with several threads the worker
processes use the cores with no synchronisation at all. Every backend gives the sequential
backend's numbers (bitwise for ``processes``; to rounding for ``vectorized``), so the choice
changes only the speed.

The choice reads the run's built local solver (the one the run trains with, for the vectorised
backend's capability check) and :class:`BackendOptions`, the few run options it depends on.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from fedhet.backends.base import Backend
from fedhet.backends.processes import ProcessPoolBackend, fork_available
from fedhet.backends.ray_backend import RaySettings
from fedhet.backends.sequential import SequentialBackend
from fedhet.backends.vectorized import VectorizedBackend, unsupported_reason
from fedhet.client.base import LocalSolver
from fedhet.config.schema import ExperimentConfig
from fedhet.core.machine import usable_cpus
from fedhet.core.task import FederatedTask

BACKENDS = ("auto", "sequential", "vectorized", "processes", "ray")

# Below this many parameter-example products per local step (d x B; the FedAvg MLP with B = 32 has
# 6.4e6), a step is so short that the per-round messages to worker processes would eat the gain
# (benchmarks/README.md, "Results", has the measured rounds).
PROCESS_MIN_STEP_WORK = 1_000_000


@dataclasses.dataclass(frozen=True)
class BackendOptions:
    """The run options backend choice reads (:meth:`from_config` takes them from a configuration)."""

    threads: Optional[int] = None                  # run.threads: caps the usable CPUs
    batch_size: int = 1                            # client.batch_size: B in a local step's work d x B
    ray: RaySettings = dataclasses.field(default_factory=RaySettings)   # run.ray_*, for backend = "ray"

    @classmethod
    def from_config(cls, config: ExperimentConfig) -> BackendOptions:
        return cls(threads=config.run.threads, batch_size=config.client.options.batch_size,
                   ray=RaySettings.from_run_options(config.run))


def _processes(cpus: int) -> str:
    return f"{cpus} processes (this one and {cpus - 1} forked worker{'s' if cpus != 2 else ''}), one thread each"


def _vectorized_or_sequential(task: FederatedTask, solver: LocalSolver, why: str) -> tuple[Backend, str]:
    reason = unsupported_reason(task, solver)
    if reason is not None:
        return SequentialBackend(), f"{why}, but {reason}: sequential instead"
    return VectorizedBackend(), why


def select_backend(name: str, task: FederatedTask, solver: LocalSolver,
                   options: BackendOptions = BackendOptions()) -> tuple[Backend, str]:
    """``(backend, reason)`` for ``run.backend = name``, to train ``solver`` on ``task``."""
    if name not in BACKENDS:
        raise ValueError(f"run.backend = {name!r}: unknown backend; allowed: {', '.join(BACKENDS)}")
    cpus = usable_cpus(options.threads)
    on_cpu = task.device.type == "cpu"
    if name == "sequential":
        return SequentialBackend(), "requested"
    if name == "vectorized":
        return _vectorized_or_sequential(task, solver, "requested")
    if name == "processes":
        if not on_cpu:
            return _vectorized_or_sequential(task, solver,
                                             f"processes requested, but the task is on {task.device}: vectorized")
        if not fork_available():
            return SequentialBackend(), "processes requested, but this platform cannot fork: sequential instead"
        return ProcessPoolBackend(cpus), f"requested: {_processes(cpus)}"

    if name == "ray":
        return _ray_backend(task, options)

    # auto: never ray (see the module docstring)
    if not on_cpu:
        return _vectorized_or_sequential(task, solver, f"auto: {task.device.type} device")
    if cpus < 2:
        limit = "run.threads = 1" if options.threads == 1 else "the process may use one CPU"
        return SequentialBackend(), f"auto: {limit}"
    if not fork_available():
        return SequentialBackend(), "auto: this platform cannot fork worker processes"
    step_work = task.spec.dim * options.batch_size
    if step_work < PROCESS_MIN_STEP_WORK:
        return SequentialBackend(), (f"auto: a local step is tiny (d x B = {step_work:.2g} < {PROCESS_MIN_STEP_WORK:.0e}), "
                                     f"so messages to worker processes would cost more than they save")
    return ProcessPoolBackend(cpus), f"auto: CPU with {cpus} usable cores: {_processes(cpus)}"


def _ray_backend(task: FederatedTask, options: BackendOptions) -> tuple[Backend, str]:
    # The module is light; Ray itself, an optional extra (fedhet[ray]), is imported when it connects.
    from fedhet.backends.ray_backend import RayBackend
    from fedhet.errors import FedhetError

    settings = options.ray
    if task.device.type not in ("cpu", "cuda"):
        raise FedhetError(f"run.backend = 'ray' runs on CPUs or CUDA GPUs; this task is on {task.device}")
    if task.device.type == "cuda" and settings.gpus_per_actor <= 0:
        raise FedhetError("run.backend = 'ray' with a task on a GPU needs run.ray_gpus_per_actor > 0 "
                          "(e.g. 0.5 puts two actors on each GPU), or run.device = 'cpu'")
    # Connected now: a wrong run.ray_address stops the run before its first checkpoint.
    backend = RayBackend(settings, threads=options.threads, connect=True)
    where = f"cluster at {settings.address}" if settings.address is not None else "a local Ray"
    actors = f"{settings.actors} actors" if settings.actors is not None else "one actor per free share of CPUs"
    return backend, (f"requested: {actors} on {where}, {settings.cpus_per_actor:g} CPU(s) and "
                     f"{settings.gpus_per_actor:g} GPU(s) each")
