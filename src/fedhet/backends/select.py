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

The vectorised backend is never picked on a CPU: with one thread a vmap over clients is no faster
than the loop (benchmarks/README.md has the measurement), and with several threads the worker
processes use the cores with no synchronisation at all. Every backend gives the sequential
backend's numbers (bitwise for ``processes``; to rounding for ``vectorized``), so the choice
changes only the speed.
"""
from __future__ import annotations

from typing import Any, Optional

from fedhet.backends.base import usable_cpus
from fedhet.backends.processes import ProcessPoolBackend, fork_available
from fedhet.backends.sequential import SequentialBackend
from fedhet.backends.vectorized import VectorizedBackend, unsupported_reason
from fedhet.core.task import FederatedTask

BACKENDS = ("auto", "sequential", "vectorized", "processes")

# Below this many parameter-example products per local step (d x B; the FedAvg MLP with B = 32 has
# 6.4e6), a step is so short that the per-round messages to worker processes would eat the gain
# (benchmarks/README.md, "Results", has the measured rounds).
PROCESS_MIN_STEP_WORK = 1_000_000


def _processes(cpus: int) -> str:
    return f"{cpus} processes (this one and {cpus - 1} forked worker{'s' if cpus != 2 else ''}), one thread each"


def _solver_from(config: Any) -> Optional[Any]:
    """The run's local solver (for capability checks), or None without a config."""
    if config is None:
        return None
    from fedhet.core.registry import CLIENT_SOLVERS
    return CLIENT_SOLVERS.get(config.client.name, key="client.name").factory(config.client.options)


def _vectorized_or_sequential(task: FederatedTask, solver: Any, why: str) -> tuple[Any, str]:
    reason = unsupported_reason(task, solver)
    if reason is not None:
        return SequentialBackend(), f"{why}, but {reason}: sequential instead"
    return VectorizedBackend(), why


def select_backend(name: str, task: FederatedTask, config: Any = None) -> tuple[Any, str]:
    """``(backend, reason)`` for ``run.backend = name``; ``config`` (an ExperimentConfig, optional)
    gives ``run.threads`` and the local solver for the capability checks."""
    if name not in BACKENDS:
        raise ValueError(f"run.backend = {name!r}: unknown backend; allowed: {', '.join(BACKENDS)}")
    threads = config.run.threads if config is not None else None
    cpus = usable_cpus(threads)
    on_cpu = task.device.type == "cpu"
    if name == "sequential":
        return SequentialBackend(), "requested"
    if name == "vectorized":
        return _vectorized_or_sequential(task, _solver_from(config), "requested")
    if name == "processes":
        if not on_cpu:
            return _vectorized_or_sequential(task, _solver_from(config),
                                             f"processes requested, but the task is on {task.device}: vectorized")
        if not fork_available():
            return SequentialBackend(), "processes requested, but this platform cannot fork: sequential instead"
        return ProcessPoolBackend(cpus), f"requested: {_processes(cpus)}"

    # auto
    if not on_cpu:
        return _vectorized_or_sequential(task, _solver_from(config), f"auto: {task.device.type} device")
    if cpus < 2:
        limit = "run.threads = 1" if threads == 1 else "the process may use one CPU"
        return SequentialBackend(), f"auto: {limit}"
    if not fork_available():
        return SequentialBackend(), "auto: this platform cannot fork worker processes"
    batch = config.client.options.batch_size if config is not None else 1
    step_work = task.spec.dim * batch
    if step_work < PROCESS_MIN_STEP_WORK:
        return SequentialBackend(), (f"auto: a local step is tiny (d x B = {step_work:.2g} < {PROCESS_MIN_STEP_WORK:.0e}), "
                                     f"so messages to worker processes would cost more than they save")
    return ProcessPoolBackend(cpus), f"auto: CPU with {cpus} usable cores: {_processes(cpus)}"
