"""One local step of the claims' MLP on the sequential backend: today's step against the fused step
(fedhet.backends.fused_step) and the floor of its eight matrix products, at the claims' batch sizes.

The claims tier is mostly local SGD steps of the FedAvg MLP (784-200-200-10, Fashion-MNIST) on the
sequential backend at batch 16 (FedAU), 50 (FedSpeed) and 64 (FedAWARE), one torch thread a run.
Implementations, alternated (the order rotated every repetition) and timed ``--repeats`` times:

- ``today``: ``SequentialBackend(fused_step=False).train_cohort``: the hand-written gradient into the
  flat gradient buffer through ``grad_fn`` and ``LocalSolver.step`` (the step before the fused one);
- ``fused``: ``SequentialBackend().train_cohort``: the fused step;
- ``gemm8``: the step's eight matrix products alone (three forward ``addmm``, three weight gradients,
  two input gradients; the first layer needs none), at the same shapes, on the same weights.

Each repetition trains one round of ``--clients`` clients x ``--steps`` fixed steps from the same
start (the backends' per-client work included: plan, batches, ``w <- x``, the upload); ``gemm8`` runs
as many steps. Figures: median microseconds a step, CPU time of this process (the steadier clock on
a shared machine) and wall time.

Usage (from the repository root): ``PYTHONPATH=src python benchmarks/bench_fused_step.py [--solver sgd]
[--batches 16 50 64] [--repeats 15] [--clients 4] [--steps 25] [--out benchmarks/results]``.
Writes ``fused-step-<timestamp>.json`` and ``.md``.
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from machine import machine  # noqa: E402
from result_files import write_results  # noqa: E402

import fedhet.components  # noqa: E402,F401  (registers the solvers)
from fedhet.backends.base import RoundWork  # noqa: E402
from fedhet.backends.fused_step import fused_step_obstacle  # noqa: E402
from fedhet.backends.sequential import SequentialBackend  # noqa: E402
from fedhet.config.schema import load_config  # noqa: E402
from fedhet.core.registry import CLIENT_SOLVERS  # noqa: E402
from fedhet.engine.runner import build_federation  # noqa: E402

IMPLS = ("today", "fused", "gemm8")


def gemm8(task, batch: int, steps: int, generator: torch.Generator):
    """``steps`` times the eight matrix products of one step at ``batch``, on the task's weights."""
    views = task.spec.views(task.spec.flatten(task.model, dtype=task.dtype))
    layers = [(views[f"{name}.weight"], views[f"{name}.bias"])
              for name in ("hidden_layers.0", "hidden_layers.1", "output")]
    inputs = task.train.inputs[:batch].reshape(batch, -1)
    grads_out = [torch.randn(batch, weight.shape[0], generator=generator, dtype=task.dtype) for weight, _ in layers]

    def run() -> None:
        for _ in range(steps):
            h, hidden = inputs, []
            for weight, bias in layers:
                hidden.append(h)
                h = torch.addmm(bias, h, weight.t())
            for i, (weight, _) in enumerate(layers):
                torch.mm(grads_out[i].t(), hidden[i])
                if i > 0:
                    grads_out[i].mm(weight)
    return run


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--solver", default="sgd")
    parser.add_argument("--batches", type=int, nargs="+", default=[16, 50, 64])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    line = machine(f"torch {torch.__version__}", "one torch thread")
    config = load_config(None, ["data.name=fmnist", "partition.name=iid", "partition.num_clients=60",
                                "model.name=mlp", f"client.name={args.solver}", "client.learning_rate=0.01",
                                "run.progress=false"])
    task = build_federation(config, torch.device("cpu")).task
    entry = CLIENT_SOLVERS.get(args.solver)
    x = task.spec.flatten(task.model, dtype=task.dtype).clone()
    generator = torch.Generator().manual_seed(0)
    backends = {"today": SequentialBackend(fused_step=False), "fused": SequentialBackend()}
    results = []
    for batch in args.batches:
        options = dataclasses.replace(config.client.options, batch_size=batch, steps=args.steps)
        solver = entry.factory(options)
        obstacle = fused_step_obstacle(task, solver)
        if obstacle is not None:
            raise SystemExit(f"bench_fused_step: {args.solver} does not take the fused step: {obstacle}")
        work = RoundWork(round_index=0, seed=1, params=x, client_ids=torch.arange(args.clients), client_states={},
                         broadcast={}, learning_rate=0.01)
        steps = args.clients * args.steps
        runs: dict[str, Callable[[], object]] = {
            name: (lambda backend=backend: backend.train_cohort(task, solver, work)) for name, backend in backends.items()}
        runs["gemm8"] = gemm8(task, batch, steps, generator)
        for run in runs.values():                   # warm-up
            run()
        cpu: dict[str, list[float]] = {name: [] for name in IMPLS}
        wall: dict[str, list[float]] = {name: [] for name in IMPLS}
        for repeat in range(args.repeats):
            order = IMPLS[repeat % len(IMPLS):] + IMPLS[:repeat % len(IMPLS)]
            for name in order:
                cpu_start, wall_start = time.process_time(), time.perf_counter()
                runs[name]()
                cpu[name].append((time.process_time() - cpu_start) / steps * 1e6)
                wall[name].append((time.perf_counter() - wall_start) / steps * 1e6)
        result = {"batch": batch, "cpu_us": {n: statistics.median(v) for n, v in cpu.items()},
                  "wall_us": {n: statistics.median(v) for n, v in wall.items()}, "all_cpu_us": cpu, "all_wall_us": wall}
        results.append(result)
        print(batch, {n: round(v, 1) for n, v in result["cpu_us"].items()}, flush=True)

    load = open("/proc/loadavg").read().split()[:3]
    rows = [f"Local step of the claims' MLP (784-200-200-10, float32), solver {args.solver}, sequential backend: "
            f"median us a step of {args.repeats} alternated repetitions of {args.clients} clients x {args.steps} "
            f"steps; {line}; load average at the end {' '.join(load)}", "",
            f"Command: `python benchmarks/bench_fused_step.py {' '.join(sys.argv[1:] if argv is None else argv)}`", "",
            "| batch | today CPU us | fused CPU us | gemm8 CPU us | today / fused | fused - gemm8 | "
            "today wall us | fused wall us | gemm8 wall us |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        c, w = r["cpu_us"], r["wall_us"]
        rows.append(f"| {r['batch']} | {c['today']:.0f} | {c['fused']:.0f} | {c['gemm8']:.0f} | "
                    f"{c['today'] / c['fused']:.2f} | {c['fused'] - c['gemm8']:.0f} | {w['today']:.0f} | "
                    f"{w['fused']:.0f} | {w['gemm8']:.0f} |")
    write_results(args.out, "fused-step", {"machine": line, "solver": args.solver, "repeats": args.repeats,
                                           "clients": args.clients, "steps": args.steps, "load_end": load,
                                           "command": " ".join(sys.argv), "results": results}, "\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
