"""Workload W's rounds in one process, implementations alternated round by round: the floor's loop
against fedhet's ``sequential`` backend (with autograd, and with the hand-written MLP gradient) and
the backend ``auto`` picks.

Usage (from the repository root, fedhet importable, e.g. ``PYTHONPATH=src``):

    python benchmarks/bench_local_step.py [--model mlp|cnn] [--rounds 12] [--no-eval] [--out benchmarks/results]

Every round trains W's cohort of that round (10 clients of 600 Fashion-MNIST images, 19 steps of
batch 32, plain SGD lr 0.05, from the same start point) once with each implementation, in an order
rotated every round, and then evaluates on the 10,000 test images as W does (unless ``--no-eval``);
the clock covers training and evaluation, not aggregation and not starting processes (``auto``'s
workers are forked in an untimed warm-up round). Alternating within a round puts every
implementation under the same machine load, so on a shared machine the ratios are steadier than
bench_w.py's whole-run times, at the price of leaving out what a whole run adds (aggregation,
metrics, start-up). Implementations:

- ``floor``: the plain PyTorch loop of impl_floor.py (``nn.Module``, ``torch.optim.SGD``,
  ``load_state_dict`` per client, a batch by advanced indexing, autograd; one thread), evaluated
  with workload.evaluate;
- ``sequential-autograd``: ``SequentialBackend(hand_written_mlp=False)`` (one thread);
- ``sequential``: ``SequentialBackend()``, the hand-written gradient of fedhet.backends.mlp_grad
  for the MLP (for the CNN it is the autograd path again);
- ``auto``: the backend ``run.backend = "auto"`` selects for W (on a 2-core CPU: ``processes``).

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
from fedhet.engine.backend_choice import BackendOptions, select_backend  # noqa: E402
from fedhet.backends.sequential import SequentialBackend  # noqa: E402
from fedhet.config.schema import load_config  # noqa: E402
from fedhet.engine.runner import build_federation  # noqa: E402
from fedhet.core.task import evaluate  # noqa: E402
from fedhet.core.registry import CLIENT_SOLVERS  # noqa: E402

IMPLS = ("floor", "sequential-autograd", "sequential", "auto")
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_of(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` so far, in clock ticks (10 ms here)."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def w_config(model: str):
    return load_config(None, [
        "data.name=fmnist", f"data.root={W.data_dir()}", "partition.name=iid",
        f"partition.num_clients={W.NUM_CLIENTS}", f"model.name={model}", "participation.name=uniform",
        f"participation.clients_per_round={W.CLIENTS_PER_ROUND}", "client.name=sgd",
        f"client.learning_rate={W.LEARNING_RATE}", f"client.batch_size={W.BATCH_SIZE}",
        f"client.epochs={W.LOCAL_EPOCHS}", f"run.eval_batch_size={W.EVAL_BATCH}", "run.progress=false",
        f"run.seed={W.SEED}"])


def floor_round(task, x: torch.Tensor, client_ids: list[int], generator: torch.Generator) -> None:
    """impl_floor.py's client loop on the task's data (a fresh model copy holds the parameters)."""
    model = floor_round.model
    # workload.py's modules name their layers differently; the parameters come in the same order.
    state = {name: view.clone() for name, view in zip(model.state_dict(), task.spec.views(x).values())}
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
    parser.add_argument("--no-eval", action="store_true", help="time the training only")
    parser.add_argument("--out", default=str(HERE / "results"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = w_config(args.model)
    task = build_federation(config, torch.device("cpu")).task
    floor_round.model = W.make_model(args.model)
    solver = CLIENT_SOLVERS.get("sgd").factory(config.client.options)
    x = task.spec.flatten(task.model, dtype=task.dtype).clone()
    auto, reason = select_backend("auto", task, solver, BackendOptions.from_config(config))
    backends = {"sequential-autograd": SequentialBackend(hand_written_mlp=False), "sequential": SequentialBackend(),
                "auto": auto}
    test_x, test_y = task.test.inputs, task.test.targets
    generator = torch.Generator().manual_seed(W.SEED)
    W.warm_up_torch()
    times: dict[str, list[float]] = {impl: [] for impl in IMPLS}
    cpu: dict[str, list[float]] = {impl: [] for impl in IMPLS}
    load_start = open("/proc/loadavg").read().split()[:3]
    for round_index in range(args.rounds + 1):          # round 0 warms every path up, untimed
        client_ids = W.sample_clients(round_index)
        work = RoundWork(round_index=round_index, seed=W.SEED, params=x,
                         client_ids=torch.tensor(client_ids, dtype=torch.int64), client_states={}, broadcast={},
                         learning_rate=W.LEARNING_RATE)
        order = IMPLS[round_index % len(IMPLS):] + IMPLS[:round_index % len(IMPLS)]
        for impl in order:
            pool = getattr(backends.get(impl), "_pool", None)      # auto's worker processes, if any
            workers = [process.pid for process in pool.processes] if pool is not None else []
            workers_before = [cpu_of(pid) for pid in workers]
            cpu_before = time.process_time()
            started = time.perf_counter()
            if impl == "floor":
                floor_round(task, x, client_ids, generator)
                if not args.no_eval:
                    W.evaluate(floor_round.model, test_x, test_y)
            else:
                backends[impl].train_cohort(task, solver, work)
                if not args.no_eval:
                    evaluate(task, x, batch_size=config.run.eval_batch_size, backend=backends[impl])
            if round_index > 0:
                times[impl].append(time.perf_counter() - started)
                # The critical path: the larger of this process's and the busiest worker's CPU time.
                cpu[impl].append(max([time.process_time() - cpu_before] +
                                     [cpu_of(pid) - before for pid, before in zip(workers, workers_before)]))
    load_end = open("/proc/loadavg").read().split()[:3]
    getattr(auto, "close", lambda: None)()
    medians = {impl: statistics.median(values) for impl, values in times.items()}
    cpu_medians = {impl: statistics.median(values) for impl, values in cpu.items()}
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    command = "python " + " ".join(shlex.quote(a) for a in ["benchmarks/bench_local_step.py", *sys.argv[1:]])
    what = "training only" if args.no_eval else "training and the test evaluation"
    lines = [f"# W-{args.model.upper()} rounds alternated in one process ({stamp} UTC)", "",
             f"Machine: {machine(f'torch {torch.__version__}')}; load average at start "
             f"{' '.join(load_start)}, at end {' '.join(load_end)}.", "", f"Command: `{command}`", "",
             f"Per round {what} (10 clients x 19 steps), {args.rounds} rounds, implementations "
             f"alternated within each round; median seconds per round. `auto`: {auto.name} ({reason}).", "",
             "CPU s/round: the CPU time of the round, for `auto` the larger of this process's and its busiest "
             "worker's (its critical path; workers' CPU time is read in 10 ms ticks): what the wall time "
             "would be on idle cores, less waiting, and the steadier figure on a busy machine.", "",
             "| implementation | wall s/round (median) | wall ratio to floor | wall min | wall max "
             "| CPU s/round (median) | CPU ratio to floor |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for impl in IMPLS:
        lines.append(f"| {impl} | {medians[impl]:.4f} | {medians[impl] / medians['floor']:.2f} | "
                     f"{min(times[impl]):.4f} | {max(times[impl]):.4f} | {cpu_medians[impl]:.4f} | "
                     f"{cpu_medians[impl] / cpu_medians['floor']:.2f} |")
    table = "\n".join(lines) + "\n"
    print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record = {"model": args.model, "rounds": args.rounds, "evaluation": not args.no_eval, "auto": auto.name,
              "auto_reason": reason, "seconds": times, "median": medians, "cpu_seconds": cpu,
              "cpu_median": cpu_medians,
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
