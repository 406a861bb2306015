"""How a sweep executes: the ``[sweep]`` table of the base experiment file, and the command-line flags.

::

    [sweep]
    executor = "ray"              # "local" (worker processes on this machine) or "ray"
    ray_address = "auto"          # join this cluster ("auto": the one `ray start` made here); unset: a local Ray
    ray_cpus_per_run = 1          # the resource bundle of one run
    ray_gpus_per_run = 0
    ray_transfer = "auto"         # "auto" | "files" | "shared": how run directories reach the sweep directory
    ray_max_attempts = 3          # attempts of a run whose node or worker died
    lockstep = "auto"             # "off" | "on" | "auto": train compatible runs together in this process
    lockstep_runs = 64            # the most runs one lockstep group trains together

The table describes how to execute the sweep, never what a run computes: ``fedhet run`` ignores it
(:func:`fedhet.config.schema.resolve_config`), and a run's configuration and results are the same
whichever executor ran it. A command-line flag (``--executor``, ``--ray-address``,
``--ray-cpus-per-run`` ...) overrides the table's key. ``docs/experiments.md`` ("Sweeps on a Ray
cluster") describes the Ray executor.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

from fedhet.config import ConfigError, build_options, option

SECTION = "sweep"
EXECUTORS = ("local", "ray")
LOCKSTEP = ("off", "on", "auto")
TRANSFERS = ("auto", "files", "shared")


@dataclasses.dataclass(frozen=True)
class SweepOptions:
    """The ``[sweep]`` table (module docstring)."""

    executor: str = option("local", choices=EXECUTORS,
                           help="'local': runs as worker processes on this machine (--jobs); 'ray': each run a "
                                "Ray task on a cluster, one resource bundle per run (needs fedhet[ray])")
    jobs: Optional[int] = option(None, ge=1, help="local executor: runs in parallel (default: one per usable core)")
    ray_address: Optional[str] = option(None, help="ray executor: the cluster to join ('auto' or host:port); "
                                                   "unset: start a local Ray for the sweep and stop it after")
    ray_cpus_per_run: float = option(1.0, gt=0, help="ray executor: CPUs reserved for each run (also the run's "
                                                     "torch threads when run.threads is unset)")
    ray_gpus_per_run: float = option(0.0, ge=0, help="ray executor: GPUs reserved for each run (fractions share one)")
    ray_transfer: str = option("auto", choices=TRANSFERS,
                               help="ray executor: 'shared' writes run directories in place (the sweep directory is "
                                    "visible on every node), 'files' runs in a temporary directory on the node and "
                                    "ships the files back at every checkpoint, 'auto' picks per node")
    ray_max_attempts: int = option(3, ge=1, help="ray executor: attempts of a run whose node or worker died; each "
                                                 "resumes from the last checkpoint that reached the sweep directory")
    lockstep: str = option("auto", choices=LOCKSTEP,
                           help="local executor: 'on' trains the runs that share a model and a local solver in "
                                "lockstep groups in this process (each round one batched computation of every "
                                "run's clients; docs/design.md, \"Lockstep runs\"); 'auto' (the default) does so "
                                "where the runs compute on a CUDA device (on a CPU runs alone measured faster); "
                                "'off' runs each run alone")
    lockstep_runs: int = option(64, ge=1, help="lockstep: the most runs one group trains together")


def sweep_options(table: Optional[Mapping[str, Any]], overrides: Optional[Mapping[str, Any]] = None) -> SweepOptions:
    """The options of the ``[sweep]`` table with ``overrides`` (flag values; None means not given)."""
    if table is not None and not isinstance(table, Mapping):
        raise ConfigError(SECTION, table, "expected a table ([sweep])")
    values = dict(table or {})
    values.update({key: value for key, value in dict(overrides or {}).items() if value is not None})
    return build_options(SweepOptions, values, section=SECTION)
