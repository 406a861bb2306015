"""Cost of per-client evaluation (fedhet.engine.client_eval) next to one global test evaluation.

Fashion-MNIST, the FedAvg MLP, N clients (default 1,000, IID), one torch thread (the runner's
default), CPU. Times, median of --repeats:

- ``global_test``: one evaluation on the 10,000 test images (``fedhet.core.task.evaluate``);
- ``clients_holdout``: per-client accuracies and statistics on the held-out slices
  (``data.client_test_fraction``, default 0.2: 12,000 examples);
- ``clients_train``: the same on the clients' training data (``run.client_eval_data = "train"``);
- ``clients_loop``: for reference, the naive way: one evaluation call per client (one repeat).

    PYTHONPATH=src python benchmarks/bench_client_eval.py [--clients 1000] [--repeats 5]

Prints a table and writes ``benchmarks/results/client-eval-<UTC time>.json``.
"""
from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from fedhet.config.schema import load_config
from fedhet.core.io import atomic_write_json
from fedhet.core.task import evaluate
from fedhet.engine.client_eval import (client_accuracies, client_accuracy_statistics, holdout_eval_set,
                                       train_eval_set)
from fedhet.engine.runner import build_federation, configure_threads


def timed(function, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return times


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--fraction", type=float, default=0.2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args(argv)

    config = load_config(None, ["data.name=fmnist", "model.name=mlp", "partition.name=iid",
                                f"partition.num_clients={args.clients}", f"data.client_test_fraction={args.fraction}",
                                "run.client_eval_every=1", "run.device=cpu"])
    device = torch.device("cpu")
    threads = configure_threads(config.run.threads, device)
    federation = build_federation(config, device)
    task = federation.task
    params = task.spec.flatten(task.model)
    train = federation.bundle.train
    holdout = holdout_eval_set(train.inputs, train.targets, federation.held_out, task)
    on_train = train_eval_set(task)
    batch = config.run.eval_batch_size

    def per_client(evalset):
        return lambda: client_accuracy_statistics(client_accuracies(task, params, evalset, batch_size=batch))

    def loop_over_clients():
        # One forward pass per client on its own held-out slice: what a per-client loop costs.
        starts = torch.cumsum(holdout.counts, 0) - holdout.counts
        with torch.inference_mode():
            for start, count in zip(starts.tolist(), holdout.counts.tolist()):
                logits = torch.func.functional_call(task.model, task.spec.views(params),
                                                    (holdout.inputs[start:start + count],))
                (logits.argmax(1) == holdout.targets[start:start + count]).float().mean()

    evaluate(task, params, batch_size=batch)             # warm-up (pass size measured once per task)
    per_client(holdout)()
    results = {
        "global_test": timed(lambda: evaluate(task, params, batch_size=batch), args.repeats),
        "clients_holdout": timed(per_client(holdout), args.repeats),
        "clients_train": timed(per_client(on_train), args.repeats),
        "clients_loop": timed(loop_over_clients, 1),
    }
    examples = {"global_test": len(task.test), "clients_holdout": int(holdout.counts.sum()),
                "clients_train": int(on_train.counts.sum()), "clients_loop": int(holdout.counts.sum())}
    base = statistics.median(results["global_test"])
    print(f"Fashion-MNIST, MLP, {args.clients} clients, {threads} torch thread(s), median of {args.repeats}")
    print(f"{'evaluation':<16} {'examples':>9} {'seconds':>9} {'x global test':>14}")
    rows = {}
    for name, times in results.items():
        median = statistics.median(times)
        rows[name] = {"examples": examples[name], "median_seconds": median, "seconds": times,
                      "ratio_to_global_test": median / base}
        print(f"{name:<16} {examples[name]:>9} {median:>9.4f} {median / base:>14.2f}")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) / f"client-eval-{stamp}.json"
    atomic_write_json(out, {"benchmark": "client_eval", "utc": stamp, "clients": args.clients,
                            "client_test_fraction": args.fraction, "repeats": args.repeats, "threads": threads,
                            "torch": torch.__version__, "python": platform.python_version(),
                            "command": " ".join(["python", *sys.argv]), "results": rows})
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
