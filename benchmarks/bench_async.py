"""The asynchronous event loop's cost per arrival (docs/async.md, "Cost").

Per arrival the loop pops an event, draws the next client among the idle available ones (a scan of
the N clients' availability), computes its completion time, and per server step assembles the
buffer's cohort. This script times that work alone: the backend is a stub that returns a zero update
at once and the model is FedProx's synthetic logistic regression, so training and the server step
cost next to nothing. It prints the median over ``--repeats`` of the loop's time per arrival in
microseconds (wall and CPU) for N clients and concurrency C (FedBuff, K = C / 2).

Usage: .venv/bin/python benchmarks/bench_async.py [--clients 100,1000] [--concurrency 20,50] [--steps 200]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from fedhet.config.schema import load_config
from fedhet.core.cohort import Cohort
from fedhet.engine.assembly import simulator_from_config
from fedhet.engine.federation import build_federation


class ZeroUpdate:
    """A backend that trains nothing: every client uploads a zero update of one local step."""

    name = "zero"

    def train_cohort(self, task, solver, work):
        k = int(work.client_ids.numel())
        cohort = Cohort(work.client_ids.clone(), torch.zeros(k, task.spec.dim, dtype=task.dtype),
                        task.client_sizes[work.client_ids], torch.ones(k, dtype=torch.int64),
                        torch.zeros(k, dtype=task.dtype))
        return cohort, {name: value for name, value in work.client_states.items()}

    def close(self):
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="100,1000")
    parser.add_argument("--concurrency", default="20,50")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for clients in map(int, args.clients.split(",")):
        for concurrency in map(int, args.concurrency.split(",")):
            config = load_config(None, [
                "data.name=synthetic", f"data.num_devices={clients}", "data.max_device_size=60",
                "partition.name=natural", f"partition.num_clients={clients}", "model.name=logreg",
                "participation.name=full", "client.batch_size=16", "system.profiles=lognormal",
                f"asynchronous.concurrency={concurrency}", f"asynchronous.buffer_size={concurrency // 2}"])
            federation = build_federation(config, torch.device("cpu"))
            walls, cpus = [], []
            for _ in range(args.repeats):
                simulator = simulator_from_config(config, federation, backend=ZeroUpdate())
                wall, cpu = time.perf_counter(), time.process_time()
                for _ in range(args.steps):
                    simulator.run_round()
                arrivals = args.steps * (concurrency // 2)
                walls.append((time.perf_counter() - wall) / arrivals * 1e6)
                cpus.append((time.process_time() - cpu) / arrivals * 1e6)
            print(f"N={clients:5d} C={concurrency:3d} K={concurrency // 2:3d}: {statistics.median(walls):8.1f} us wall, "
                  f"{statistics.median(cpus):8.1f} us CPU per arrival")


if __name__ == "__main__":
    main()
