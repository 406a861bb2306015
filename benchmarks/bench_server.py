"""Server-side figures of the speed issue.

1. FedAWARE's full server ``step`` (momentum update of the round's clients, incremental Gram
   matrix, min-norm weights on N x N, the step) at N in {100, 1000} clients and d in {1e5, 1e6}
   parameters, with 10 clients per round (``--per-round``) and every client's momentum already set (the state of a
   run after its first sweep: the Gram matrix and the simplex have all N clients). One torch thread,
   as in a run. Median of ``--steps`` timed steps after the momenta are filled.
2. A 1000-client FedAU run (server ``fedau``) under heterogeneous participation with the MLP on
   Fashion-MNIST (IID, 60 examples each), seconds per round, for fedhet's ``auto`` and
   ``sequential`` backends.

Usage: .venv/bin/python benchmarks/bench_server.py [--sizes 100x1e5,100x1e6,1000x1e5,1000x1e6]
           [--per-round 10] [--steps 5] [--fedau-rounds 10] [--skip-fedau] [--out benchmarks/results]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

import fedhet.components  # noqa: F401  (registers every component)
from fedhet.config.schema import load_config
from fedhet.core.cohort import Cohort
from fedhet.core.options import build_options
from fedhet.core.registry import SERVERS
from fedhet.core.store import ClientStore, StoreOptions
from fedhet.engine.callbacks import Callback
from fedhet.engine.runner import run_experiment
from fedhet.server.base import ServerContext

HERE = Path(__file__).resolve().parent


def fedaware_step_seconds(num_clients: int, dim: int, steps: int, per_round: int = 10) -> dict:
    """Median seconds of FedAWARE's ``step`` once all ``num_clients`` momenta are set."""
    torch.set_num_threads(1)
    entry = SERVERS.get("fedaware")
    server = entry.factory(build_options(entry.options_cls, {}, section="server"))
    generator = torch.Generator().manual_seed(0)
    sizes = torch.full((num_clients,), 600, dtype=torch.int64)

    def context(round_index: int) -> ServerContext:
        return ServerContext(round_index=round_index, num_clients=num_clients,
                             make_store=lambda name, subset=None: ClientStore(name, num_clients, dim,
                                                                              options=StoreOptions(), subset=subset))

    def cohort(ids: torch.Tensor) -> Cohort:
        k = len(ids)
        return Cohort(client_ids=ids, deltas=0.01 * torch.randn(k, dim, generator=generator),
                      num_examples=sizes[ids], local_steps=torch.full((k,), 19), train_loss=torch.zeros(k))

    params = torch.zeros(dim)
    state = server.init(params, context(0))
    round_index = 0
    fill = 100   # fill the momenta in blocks of 100 clients (bounded memory)
    for start in range(0, num_clients, fill):
        ids = torch.arange(start, min(start + fill, num_clients))
        params, state, _ = server.step(state, params, cohort(ids), context(round_index))
        round_index += 1
    timings = []
    for _ in range(steps):
        ids = torch.randperm(num_clients, generator=generator)[:per_round].sort().values
        work = cohort(ids)
        started = time.perf_counter()
        params, state, metrics = server.step(state, params, work, context(round_index))
        timings.append(time.perf_counter() - started)
        round_index += 1
    return {"num_clients": num_clients, "dim": dim, "clients_per_round": per_round,
            "step_seconds_median": statistics.median(timings), "step_seconds_all": timings,
            "solver_iterations": metrics.get("solver_iterations")}


class RoundClock(Callback):
    def on_run_start(self, run):
        self.started = time.perf_counter()
        self.rounds = 0

    def on_round_end(self, run, record):
        self.rounds = record["round"]
        self.wall = time.perf_counter() - self.started
        return False


def fedau_seconds_per_round(backend: str, rounds: int) -> dict:
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="fedhet-fedau-") as out:
        config = load_config(None, [
            "data.name=fmnist", "partition.name=iid", "partition.num_clients=1000", "model.name=mlp",
            "participation.name=heterogeneous", "server.name=fedau", "client.learning_rate=0.05",
            "client.batch_size=32", "client.epochs=1", f"run.rounds={rounds}", "run.eval_every=1",
            "run.eval_batch_size=1000", f"run.checkpoint_every={rounds}", f"run.backend={backend}",
            "run.device=cpu", "run.progress=false", f"run.out_dir={out}", "run.name=fedau"])
        clock = RoundClock()
        summary = run_experiment(config, callbacks=[clock], log=notes.append)
    return {"backend": summary.get("backend"), "rounds": clock.rounds, "wall_seconds": clock.wall,
            "seconds_per_round": clock.wall / max(clock.rounds, 1), "final_accuracy": summary.get("final_accuracy"),
            "notes": [n for n in notes if n.startswith("backend")]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100x1e5,100x1e6,1000x1e5,1000x1e6")
    parser.add_argument("--per-round", type=int, default=10, help="clients per round in the FedAWARE step")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--fedau-rounds", type=int, default=10)
    parser.add_argument("--skip-fedau", action="store_true")
    parser.add_argument("--out", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    print("bench_server: " + " ".join([sys.executable, *sys.argv]), flush=True)
    results = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
               "load_start": os.getloadavg(), "fedaware": [], "fedau": []}
    for size in [s for s in args.sizes.split(",") if s]:
        n, d = size.split("x")
        row = fedaware_step_seconds(int(n), int(float(d)), args.steps, args.per_round)
        results["fedaware"].append(row)
        print(f"bench_server: FedAWARE step N={row['num_clients']} d={row['dim']:.0e}: "
              f"K={row['clients_per_round']}: {row['step_seconds_median']:.3f} s (median of {args.steps})", flush=True)
    if not args.skip_fedau:
        for backend in ("auto", "sequential"):
            row = fedau_seconds_per_round(backend, args.fedau_rounds)
            results["fedau"].append(row)
            print(f"bench_server: FedAU, 1000 clients, heterogeneous participation, MLP, backend {row['backend']}: "
                  f"{row['seconds_per_round']:.3f} s/round over {row['rounds']} rounds", flush=True)
    results["load_end"] = os.getloadavg()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"server-{datetime.datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
    path.with_suffix(".tmp").write_text(json.dumps(results, indent=1))
    os.replace(path.with_suffix(".tmp"), path)
    print(f"bench_server: wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
