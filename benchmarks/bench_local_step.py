"""Local training of workload W's cohorts in one process: the floor's loop against fedhet's
``sequential`` backend with autograd and with the hand-written MLP gradient, round by round.

Usage (from the repository root, fedhet importable, e.g. ``PYTHONPATH=src``):

    python benchmarks/bench_local_step.py [--model mlp|cnn] [--rounds 12] [--out benchmarks/results]

One thread. Every round trains W's cohort of that round (10 clients of 600 Fashion-MNIST images, 19
steps of batch 32, plain SGD lr 0.05, from the same start point) once with each implementation, in
an order rotated every round, and times only the training (no evaluation, no aggregation, no
process start). Alternating within a round puts every implementation under the same machine load,
so on a shared machine the ratios are steadier than whole-run times (bench_w.py). Implementations:

- ``floor``: the plain PyTorch loop of impl_floor.py (``nn.Module``, ``torch.optim.SGD``,
  ``load_state_dict`` per client, a batch by advanced indexing, autograd);
- ``sequential-autograd``: ``SequentialBackend(hand_written_mlp=False)``;
- ``sequential``: ``SequentialBackend()``, the hand-written gradient of fedhet.backends.mlp_grad
  for the MLP (for the CNN it is the autograd path again).

Prints a table (median seconds per round and ratio to the floor) and writes
``local-step-<timestamp>.json`` and ``.md`` under ``--out``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import workload as W  # noqa: E402
from machine import machine  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import fedhet.components  # noqa: E402,F401  (registers the solvers)
from fedhet.backends.base import RoundWork  # noqa: E402
from fedhet.backends.sequential import SequentialBackend  # noqa: E402
from fedhet.config.schema import load_config  # noqa: E402
from fedhet.engine.runner import build_federation  # noqa: E402
from fedhet.registry import CLIENT_SOLVERS  # noqa: E402

IMPLS = ("floor", "sequential-autograd", "sequential")


def w_config(model: str):
    return load_config(None, [
        "data.name=fmnist", f"data.root={W.data_dir()}", "partition.name=iid",
        f"partition.num_clients={W.NUM_CLIENTS}", f"model.name={model}", "participation.name=uniform",
        f"participation.clients_per_round={W.CLIENTS_PER_ROUND}", "client.name=sgd",
        f"client.learning_rate={W.LEARNING_RATE}", f"client.batch_size={W.BATCH_SIZE}",
        f"client.epochs={W.LOCAL_EPOCHS}", "run.progress=false", f"run.seed={W.SEED}"])


def floor_round(task, x: torch.Tensor, client_ids: list[int], generator: torch.Generator) -> None:
    """impl_floor.py's client loop on the task's data (a fresh model copy holds the parameters)."""
    model = floor_round.model
    state = {name: view.clone() for name, view in task.spec.views(x).items()}
    inputs, targets = task.train.inputs, task.train.targets
    for client_id in client_ids:
        model.load_state_dict(state)
        optimizer = torch.optim.SGD(model.parameters(), lr=W.LEARNING_RATE)
        start, end = task.client_range(client_id)
        for _ in range(W.LOCAL_EPOCHS):
            order = start + torch.randperm(end - start, generator=generator)
            for batch in order.split(W.BATCH_SIZE):
                optimizer.zero_grad()
                F.cross_entropy(model(inputs[batch]), targets[batch]).backward()
                optimizer.step()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="mlp", choices=("mlp", "cnn"))
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--out", default=str(HERE / "results"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = w_config(args.model)
    task = build_federation(config, torch.device("cpu")).task
    floor_round.model = W.make_model(args.model)
    solver = CLIENT_SOLVERS.get("sgd").factory(config.client.options)
    x = task.spec.flatten(task.model, dtype=task.dtype).clone()
    backends = {"sequential-autograd": SequentialBackend(hand_written_mlp=False), "sequential": SequentialBackend()}
    generator = torch.Generator().manual_seed(W.SEED)
    W.warm_up_torch()
    times: dict[str, list[float]] = {impl: [] for impl in IMPLS}
    load_start = open("/proc/loadavg").read().split()[:3]
    for round_index in range(args.rounds + 1):          # round 0 warms every path up, untimed
        client_ids = W.sample_clients(round_index)
        work = RoundWork(round_index=round_index, seed=W.SEED, params=x,
                         client_ids=torch.tensor(client_ids, dtype=torch.int64), client_states={}, broadcast={},
                         learning_rate=W.LEARNING_RATE)
        order = IMPLS[round_index % len(IMPLS):] + IMPLS[:round_index % len(IMPLS)]
        for impl in order:
            started = time.perf_counter()
            if impl == "floor":
                floor_round(task, x, client_ids, generator)
            else:
                backends[impl].train_cohort(task, solver, work)
            if round_index > 0:
                times[impl].append(time.perf_counter() - started)
    load_end = open("/proc/loadavg").read().split()[:3]
    medians = {impl: statistics.median(values) for impl, values in times.items()}
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    command = "python " + " ".join(shlex.quote(a) for a in ["benchmarks/bench_local_step.py", *sys.argv[1:]])
    lines = [f"# Local training of W-{args.model.upper()} in one process, one thread ({stamp} UTC)", "",
             f"Machine: {machine(f'torch {torch.__version__}')}; load average at start "
             f"{' '.join(load_start)}, at end {' '.join(load_end)}.", "", f"Command: `{command}`", "",
             f"Training only (10 clients x 19 steps a round), {args.rounds} rounds, implementations "
             f"alternated within each round; median seconds per round.", "",
             "| implementation | s/round (median) | ratio to floor | min | max |", "| --- | ---: | ---: | ---: | ---: |"]
    for impl in IMPLS:
        lines.append(f"| {impl} | {medians[impl]:.4f} | {medians[impl] / medians['floor']:.2f} | "
                     f"{min(times[impl]):.4f} | {max(times[impl]):.4f} |")
    table = "\n".join(lines) + "\n"
    print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record = {"model": args.model, "rounds": args.rounds, "seconds": times, "median": medians,
              "machine": machine(f"torch {torch.__version__}"), "load_start": load_start, "load_end": load_end,
              "command": command, "utc": stamp}
    for suffix, text in (("json", json.dumps(record, indent=1) + "\n"), ("md", table)):
        path = out / f"local-step-{stamp}.{suffix}"
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text(text)
        os.replace(temporary, path)
    print(f"bench_local_step: wrote {out}/local-step-{stamp}.json and .md")


if __name__ == "__main__":
    main()
