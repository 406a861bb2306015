"""Config -> :class:`~fedhet.engine.simulator.Simulator`: the one assembly of a run's components.

``fedhet run`` (:mod:`fedhet.engine.run_handle`), the Flower ServerApp (:mod:`fedhet.flower.server_app`),
:mod:`fedhet.testing` and the tests build their simulators here, so a run, a deployment and a check
of the same config train the same components with the same options:

- the algorithm's two halves from :func:`fedhet.algorithms.build` (unless the caller built them, e.g.
  to choose the backend from the solver first);
- the participation process of ``[participation]``, with the options the virtual clock of a
  ``[system]`` section asks for (overcommit widens the cohort, docs/system.md);
- per-client stores with ``run.store_*`` (:func:`store_options`, :func:`storage_dtype_name`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from fedhet.algorithms import Algorithm, build as build_algorithm
from fedhet.backends.base import Backend
from fedhet.config.schema import ExperimentConfig, RunOptions
from fedhet.core.machine import usable_cpus
from fedhet.core.registry import PARTICIPATION
from fedhet.core.store import StoreOptions
from fedhet.engine.async_loop import async_simulator_type
from fedhet.engine.clock import build_clock
from fedhet.engine.federation import Federation
from fedhet.engine.simulator import Simulator
from fedhet.errors import FedhetError
from fedhet.participation.base import ParticipationProcess


def storage_dtype_name(run: RunOptions) -> str:
    """The dtype per-client rows are stored in: ``run.store_dtype``, where ``auto`` means ``run.dtype``
    (float32, bfloat16, float16 or float64, each the torch dtype of that name)."""
    return run.dtype if run.store_dtype == "auto" else run.store_dtype


def store_options(run: RunOptions, device: Any, stores_dir: Optional[Path] = None) -> StoreOptions:
    """How the run's per-client tables are stored (:class:`~fedhet.core.store.StoreOptions`).

    ``stores_dir``: where ``run.store_mmap = true`` keeps its memory-mapped files (a run directory's
    ``stores/``); a run that asks for them without one is refused rather than kept in memory. The
    server step runs while the backend's workers wait, so its whole-table kernels may use every CPU
    of the run (same numbers for any count: fedhet.server.table_kernels)."""
    if run.store_mmap and stores_dir is None:
        raise FedhetError("run.store_mmap = true keeps the per-client stores in files of a run directory, and "
                          "this simulator has none; run it with fedhet run (or run_experiment), or set "
                          "run.store_mmap = false")
    return StoreOptions(dtype=storage_dtype_name(run), device=str(device),
                        mmap_dir=str(stores_dir) if run.store_mmap else None, threads=usable_cpus(run.threads))


def participation_from_config(config: ExperimentConfig, options: Any = None) -> ParticipationProcess:
    """The ``[participation]`` process, with ``options`` in place of the section's when given."""
    entry = PARTICIPATION.get(config.participation.name, key="participation.name")
    return entry.factory(config.participation.options if options is None else options)


def simulator_from_config(config: ExperimentConfig, federation: Federation, *,
                          algorithm: Optional[Algorithm] = None, backend: Optional[Backend] = None,
                          participation: Optional[ParticipationProcess] = None,
                          stores_dir: Optional[Path] = None,
                          simulator_type: type[Simulator] = Simulator) -> Simulator:
    """The :class:`Simulator` of ``config`` on ``federation`` (:func:`fedhet.engine.federation.build_federation`).

    ``algorithm``: the ``(solver, server)`` pair when the caller built it already (default: built
    here from the config). ``backend``: default the sequential one (``fedhet run`` chooses with
    :func:`fedhet.engine.backend_choice.select_backend`). ``participation``: a process in place of
    the config's (a deployment's connected clients, a test's scripted rounds). ``stores_dir``: the
    memory-mapped stores' folder (:func:`store_options`). ``simulator_type``: a Simulator subclass
    taking the same arguments (the Flower ServerApp's)."""
    task = federation.task
    if config.asynchronous is not None:
        # [asynchronous]: one server version per "round", FedBuff or FedAsync (docs/async.md).
        simulator_type = async_simulator_type(config.asynchronous)
    solver, server = build_algorithm(config) if algorithm is None else algorithm
    clock, participation_options = build_clock(config.system, task, config.participation.options,
                                               seed=config.run.seed)
    if participation is None:
        participation = participation_from_config(config, participation_options)
    return simulator_type(task, participation=participation, solver=solver, server=server, seed=config.run.seed,
                          client_label_counts=federation.label_counts, backend=backend,
                          store_options=store_options(config.run, task.device, stores_dir), clock=clock)
