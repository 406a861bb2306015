"""The command-line flags that choose where a sweep's runs execute (``--executor`` and the Ray executor's
resources, shared by ``fedhet sweep`` and ``fedhet claims run``; ``--lockstep``, shared by those and by
``fedhet tune`` and ``fedhet tune-claims``), so that every command spells and explains them alike
(docs/experiments.md, "Sweeps on a Ray cluster")."""
from __future__ import annotations

import argparse


def add_executor_flags(parser: argparse.ArgumentParser, *, default: str) -> None:
    """Add ``--executor``, ``--ray-address``, ``--ray-cpus-per-run`` and ``--ray-gpus-per-run`` to
    ``parser``; ``default`` says in the help what applies when ``--executor`` is not given."""
    parser.add_argument("--executor", choices=("local", "ray"),
                        help=f"local: worker processes here (--jobs); ray: each run a Ray task on a cluster "
                             f"(needs fedhet[ray]; default: {default})")
    parser.add_argument("--ray-address", metavar="ADDRESS",
                        help="ray executor: join this cluster ('auto', or host:port); default: a local Ray")
    parser.add_argument("--ray-cpus-per-run", type=float, metavar="N", help="ray executor: CPUs per run (default 1)")
    parser.add_argument("--ray-gpus-per-run", type=float, metavar="N", help="ray executor: GPUs per run (default 0)")


def add_lockstep_flag(parser: argparse.ArgumentParser, *, runs: str = "runs", default: str = "auto") -> None:
    """Add ``--lockstep off|on|auto`` (:class:`fedhet.lab.sweep.options.SweepOptions`; docs/design.md,
    "Lockstep runs"); ``default`` says in the help what applies without it. The value is checked by
    :func:`fedhet.lab.sweep.options.sweep_options`, so that a wrong one is refused in one line naming the
    allowed values, as the ``[sweep]`` table's is."""
    parser.add_argument("--lockstep", metavar="{off,on,auto}",
                        help=f"on: train the {runs} that share a model and local solver together in this process, "
                             "one batched computation of every run's clients per round; auto: so where they "
                             "compute on a CUDA device (on a CPU runs alone measured faster); off: each run "
                             f"alone (default: {default})")
