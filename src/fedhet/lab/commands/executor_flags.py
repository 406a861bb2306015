"""The command-line flags that choose where a sweep's runs execute (``--executor`` and the Ray executor's
resources), shared by ``fedhet sweep`` and ``fedhet claims run`` so both spell and explain them alike
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
