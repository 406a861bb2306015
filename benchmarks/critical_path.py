"""CPU-time view of the processes backend on workload W, for machines too busy for wall clocks.

On a contended machine (and with Linux's autogroup scheduling, which gives each session one share
however many processes it runs) wall-clock ratios cannot show what parallel workers gain. This
script measures CPU seconds instead, per round of W (training + evaluation):

- ``sequential``: the CPU time of the one process (= its wall time on an idle core);
- ``processes``: per round, the larger of the parent's CPU time (it trains and evaluates a share
  and does the bookkeeping) and the busiest worker's: the critical path, i.e. the wall time on an
  idle machine with one core per process, minus message latency and idle waits.

Usage: .venv/bin/python benchmarks/critical_path.py mlp|cnn [rounds]. An estimate, labelled as
such; ``bench_w.py`` on a quiet machine is the measurement.
"""
import os
import sys
import time

import torch

import fedhet.components  # noqa: F401
from fedhet.backends.base import RoundWork
from fedhet.backends.processes import ProcessPoolBackend
from fedhet.backends.sequential import SequentialBackend
from fedhet.config.schema import load_config
from fedhet.core.registry import CLIENT_SOLVERS
from fedhet.core.task import evaluate
from fedhet.engine.runner import build_federation

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_of(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def main(model: str, rounds: int) -> None:
    torch.set_num_threads(1)
    config = load_config(None, ["data.name=fmnist", "partition.name=iid", "partition.num_clients=100",
                                f"model.name={model}", "client.batch_size=32", "client.learning_rate=0.05"])
    task = build_federation(config, torch.device("cpu")).task
    solver = CLIENT_SOLVERS.get("sgd").factory(config.client.options)
    x = task.spec.flatten(task.model)
    ids = [torch.arange(10 * r, 10 * r + 10) for r in range(rounds)]
    sequential, processes = SequentialBackend(), ProcessPoolBackend(2)
    processes.train_cohort(task, solver, RoundWork(99, 1, x, ids[0], {}, {}, 0.05))   # fork outside the clock
    for name, backend in (("sequential", sequential), ("processes", processes)):
        parent = critical = 0.0
        started = time.perf_counter()
        for r in range(rounds):
            workers = [p.pid for p in processes._pool.processes] if backend is processes else []
            before_workers = [cpu_of(pid) for pid in workers]
            before = time.process_time()
            backend.train_cohort(task, solver, RoundWork(r, 1, x, ids[r], {}, {}, 0.05))
            evaluate(task, x, batch_size=1000, backend=backend)
            parent_round = time.process_time() - before
            parent += parent_round
            critical += max([parent_round] + [cpu_of(pid) - b for pid, b in zip(workers, before_workers)])
        wall = time.perf_counter() - started
        print(f"{model} {name:10s}: parent CPU {parent / rounds:.3f} s/round, critical path "
              f"{critical / rounds:.3f} s/round "
              f"(wall here {wall / rounds:.3f} s/round, load {os.getloadavg()[0]:.1f})", flush=True)
    processes.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 5)
