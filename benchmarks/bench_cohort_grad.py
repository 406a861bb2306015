"""One local step's gradients for a whole cohort: ``vmap`` (torch.func) against the MLP's batched
matrix products (fedhet.backends.mlp_cohort_grad) and the sequential per-client loop.

The vectorised backend spends each local step in its cohort gradient. For the claims' MLP
(784-200-200-10) a step is a few MFLOP per client, so on a GPU the step is launch- and
Python-bound: what decides it is the work the host does per step, which this script measures on the
CPU too. Shapes: the claims' cohorts (K = 10 clients, batch 64: the FedAWARE family and FedSpeed;
batch 16: FedAU), and a tiny MLP (784-8-10, batch 4) whose arithmetic is negligible, so its time is
the per-step overhead itself.

Implementations, alternated and timed ``--repeats`` times (median ms a step; CPU time of this process
on a CPU, CUDA-synchronised wall time on a GPU):

- ``vmap``: ``vmap_cohort_grad`` (``vmap(grad_and_value(functional_call))`` and the concatenation
  into ``[K, d]``), the vectorised backend's path before the batched MLP gradient and for other models;
- ``bmm``: ``CohortMLPGradient`` (about twenty kernels a step whatever K);
- ``loop``: K calls of the sequential backend's hand-written per-client gradient
  (``MLPGradient``; on a GPU, autograd per client, since MLPGradient is CPU-only).

Usage (from the repository root): ``PYTHONPATH=src python benchmarks/bench_cohort_grad.py [--device cpu|cuda]
[--repeats 5] [--steps 50] [--out benchmarks/results]``. Writes ``cohort-grad-<timestamp>.json`` and ``.md``.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from machine import machine  # noqa: E402
from result_files import write_results  # noqa: E402

from fedhet.backends.mlp_cohort_grad import CohortMLPGradient  # noqa: E402
from fedhet.backends.mlp_grad import MLPGradient  # noqa: E402
from fedhet.backends.vectorized import vmap_cohort_grad  # noqa: E402
from fedhet.config.schema import load_config  # noqa: E402
from fedhet.core.params import bind_flat  # noqa: E402
from fedhet.engine.runner import build_federation  # noqa: E402

SHAPES = [("claims MLP, K=10, B=64", [200, 200], 10, 64), ("claims MLP, K=10, B=16", [200, 200], 10, 16),
          ("tiny MLP 784-8-10, K=10, B=4", [8], 10, 4)]


def make_task(hidden: list[int], device: str):
    config = load_config(None, ["data.name=fmnist", "partition.name=iid", "partition.num_clients=10",
                                "model.name=mlp", f"model.hidden={hidden}", "run.progress=false"])
    return build_federation(config, torch.device(device)).task


def implementations(task, num_clients: int, batch: int):
    spec, device, dtype = task.spec, task.device, task.dtype
    generator = torch.Generator().manual_seed(0)
    x = spec.flatten(task.model, dtype=dtype).to(device)
    w = (x + 0.01 * torch.randn(num_clients, x.numel(), generator=generator, dtype=dtype).to(device)).contiguous()
    index = torch.randint(0, task.train.targets.numel(), (num_clients, batch), generator=generator).to(device)
    inputs, targets = task.train.inputs[index], task.train.targets[index]
    weights = torch.full((num_clients, batch), 1.0 / batch, dtype=dtype, device=device)
    vmap, bmm = vmap_cohort_grad(task), CohortMLPGradient(task)

    def vmap_step():
        return vmap(w, inputs, targets, weights)

    def bmm_step():
        return bmm(w, inputs, targets, weights)

    row, grad = w[0].clone(), torch.zeros_like(w[0])
    if device.type == "cpu":
        per_client = MLPGradient(task, row, grad)

        def loop_step():
            for k in range(num_clients):
                per_client(w[k], inputs[k], targets[k])
    else:
        bind_flat(task.model, spec, row, grad)

        def loop_step():
            for k in range(num_clients):
                row.copy_(w[k])
                loss = task.loss_fn(task.model(inputs[k]), targets[k])
                loss.backward()
    return {"vmap": vmap_step, "bmm": bmm_step, "loop": loop_step}


def time_steps(step, steps: int, cuda: bool) -> float:
    """Milliseconds a step: CPU time of this process on a CPU, synchronised wall time on a GPU."""
    clock = time.perf_counter if cuda else time.process_time
    if cuda:
        torch.cuda.synchronize()
    start = clock()
    for _ in range(steps):
        step()
    if cuda:
        torch.cuda.synchronize()
    return (clock() - start) / steps * 1e3


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    cuda = args.device.startswith("cuda")
    gpu = torch.cuda.get_device_name(0) if cuda else "CPU, one thread"
    line = machine(f"torch {torch.__version__}", gpu)
    results = []
    for label, hidden, num_clients, batch in SHAPES:
        task = make_task(hidden, args.device)
        impls = implementations(task, num_clients, batch)
        for step in impls.values():          # warm-up
            step()
        times: dict[str, list[float]] = {name: [] for name in impls}
        for repeat in range(args.repeats):
            names = list(impls)
            names = names[repeat % len(names):] + names[:repeat % len(names)]
            for name in names:
                times[name].append(time_steps(impls[name], args.steps, cuda))
        medians = {name: statistics.median(values) for name, values in times.items()}
        results.append({"shape": label, "d": task.spec.dim, "ms_per_step": medians, "all_ms": times})
        print(label, {name: round(value, 3) for name, value in medians.items()}, flush=True)

    rows = [f"Cohort gradient, one local step of K clients (median ms a step of {args.repeats} x {args.steps}); {line}", "",
            "| shape | d | vmap | bmm | loop | vmap / bmm | loop / bmm |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        m = r["ms_per_step"]
        rows.append(f"| {r['shape']} | {r['d']:,} | {m['vmap']:.3f} | {m['bmm']:.3f} | {m['loop']:.3f} | "
                    f"{m['vmap'] / m['bmm']:.2f} | {m['loop'] / m['bmm']:.2f} |")
    write_results(args.out, "cohort-grad", {"machine": line, "command": " ".join(sys.argv), "results": results},
                  "\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
