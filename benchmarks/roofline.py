"""Roofline of workload W: counted work per round, measured machine peaks, and each implementation's
time as a multiple of the roofline limit.

Usage (from the repository root, fedhet importable, e.g. ``PYTHONPATH=src``):

    python benchmarks/roofline.py [--models mlp,cnn] [--rounds mlp=5,cnn=3]
        [--impls floor,fedhet-sequential,fedhet-auto] [--from-results] [--out benchmarks/results]

**Work per round (counted, not measured).** The model of ``benchmarks/workload.py`` is run on one
example with forward hooks on every ``nn.Linear`` and ``nn.Conv2d``, which record the real input and
output shapes. Per example:

- forward MACs: Linear ``in * out``; Conv2d ``out_elements * (in_channels / groups) * kh * kw``;
  forward FLOPs = 2 * MACs (bias adds, ReLU, pooling, softmax and the loss are not counted: < 1%);
- training FLOPs = 3 * forward (forward, gradient w.r.t. the input, gradient w.r.t. the weights);
- per round: ``clients_per_round * client_size * epochs`` training examples (6,000 in W: 19 steps
  of 32, the last 24, per client) plus the forward pass of the 10,000 test images.

**Bytes per round (a simple traffic model, float32, every access assumed to reach memory):**

- parameters, per SGD step: 6 * 4 * d bytes (forward reads W, backward reads W and writes the
  gradient, the update reads W and the gradient and writes W);
- activations, per training example: 3 * 4 * sum over the counted layers of (input + output
  elements) (forward reads the input and writes the output; backward reads them again and writes the
  gradients of the same size);
- input images: read once per training example and once per test image (in the activations above,
  as the first layer's input);
- evaluation: the parameters read once per pass of 1000 images, 4 * (input + output) bytes per
  image and layer;
- aggregation: K deltas of d floats read and one d vector written, twice (negligible).

The model ignores caches: on W-MLP (d = 199,210, 0.8 MB) the weights and a minibatch's activations
stay in L2/L3 and almost none of these bytes reach DRAM, so the byte count is an upper bound of the
DRAM traffic and the bandwidth term a pessimistic one. It ignores per-step Python and dispatch
overhead, the data gathers (``index_select`` of the minibatch), random-number draws, and the fact
that small GEMMs (32 x 784 x 200) run below the large-square peak; the peak for the MLP's own shape
is measured and printed so that this gap is visible.

**Peaks (measured here, by this script):** float32 ``torch.mm`` GFLOP/s on 1 and 2 threads on
large squares (2048 and 4096) and on the MLP's 32x784x200 shape (``[32, 784] @ [784, 200]``), best of
several timed loops; memory bandwidth from ``dst.copy_(src)`` and ``torch.add(a, b, out=c)`` on
256 MiB tensors, counting bytes read plus written. The roofline limit of a round is
``max(FLOPs / peak, bytes / bandwidth)`` with the best 2-thread matmul peak and the best 2-thread
bandwidth (the machine); a 1-thread limit is given too, since the floor and ``sequential`` use one
thread.

**Implementations' times.** By default measured now, alternating, one run each, with
``impl_floor.py`` and ``impl_fedhet.py`` (the same scripts as ``bench_w.py``; the wall time of the
training-and-evaluation loop divided by the rounds). ``--from-results`` takes instead the newest
``benchmarks/results/w-*.json`` holding each model (which may come from another machine: its
machine line is printed).

Writes ``roofline-<timestamp>.json`` and ``.md`` under ``--out`` and prints the table.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import workload as W  # noqa: E402
from machine import machine  # noqa: E402

FLOAT_BYTES = 4


# --- counting ---------------------------------------------------------------------------------------

def layer_shapes(model: nn.Module, example: torch.Tensor) -> list[dict]:
    """Per counted layer (Linear, Conv2d), for ONE example: MACs, input and output elements, params."""
    rows: list[dict] = []

    def hook(module, inputs, output):
        x = inputs[0]
        batch = x.shape[0]
        out_elems = output.numel() // batch
        in_elems = x.numel() // batch
        if isinstance(module, nn.Linear):
            macs = module.in_features * module.out_features * (out_elems // module.out_features)
        else:
            kh, kw = module.kernel_size
            macs = out_elems * (module.in_channels // module.groups) * kh * kw
        rows.append({"layer": type(module).__name__, "shape_in": list(x.shape[1:]), "shape_out": list(output.shape[1:]),
                     "macs": macs, "in_elems": in_elems, "out_elems": out_elems,
                     "params": sum(p.numel() for p in module.parameters())})

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
    try:
        with torch.no_grad():
            model(example)
    finally:
        for handle in handles:
            handle.remove()
    return rows


def count_round(model: nn.Module, clients: int = W.CLIENTS_PER_ROUND, client_size: int = W.CLIENT_SIZE,
                epochs: int = W.LOCAL_EPOCHS, batch: int = W.BATCH_SIZE, test_images: int = 10_000,
                eval_batch: int = W.EVAL_BATCH, example_shape=(1, 1, 28, 28)) -> dict:
    """FLOPs and bytes of one round of W (see the module docstring for the model)."""
    layers = layer_shapes(model, torch.zeros(example_shape))
    d = sum(p.numel() for p in model.parameters())
    forward_flops = 2 * sum(r["macs"] for r in layers)
    act_elems = sum(r["in_elems"] + r["out_elems"] for r in layers)
    steps = clients * epochs * math.ceil(client_size / batch)
    train_examples = clients * epochs * client_size
    passes = math.ceil(test_images / eval_batch)
    train_flops = 3 * forward_flops * train_examples
    eval_flops = forward_flops * test_images
    param_bytes = 6 * FLOAT_BYTES * d * steps
    act_bytes = 3 * FLOAT_BYTES * act_elems * train_examples
    eval_bytes = FLOAT_BYTES * (d * passes + act_elems * test_images)
    agg_bytes = 2 * FLOAT_BYTES * d * (clients + 1)
    return {"parameters": d, "layers": layers, "forward_flops_per_example": forward_flops,
            "activation_elements_per_example": act_elems, "steps_per_round": steps,
            "train_examples_per_round": train_examples, "test_images": test_images,
            "train_flops": train_flops, "eval_flops": eval_flops, "flops": train_flops + eval_flops,
            "param_bytes": param_bytes, "activation_bytes": act_bytes, "eval_bytes": eval_bytes,
            "aggregation_bytes": agg_bytes, "bytes": param_bytes + act_bytes + eval_bytes + agg_bytes}


# --- peaks ------------------------------------------------------------------------------------------

def best_seconds(fn, min_time: float = 0.3, trials: int = 5) -> float:
    """Best per-call seconds over ``trials`` loops of at least ``min_time`` each (after a warm-up)."""
    fn()
    calls, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 0.05:
        fn()
        calls += 1
    per_loop = max(1, int(calls * min_time / 0.05))
    best = math.inf
    for _ in range(trials):
        t0 = time.perf_counter()
        for _ in range(per_loop):
            fn()
        best = min(best, (time.perf_counter() - t0) / per_loop)
    return best


def matmul_gflops(m: int, k: int, n: int, threads: int) -> float:
    torch.set_num_threads(threads)
    a, b = torch.randn(m, k), torch.randn(k, n)
    out = torch.empty(m, n)
    seconds = best_seconds(lambda: torch.mm(a, b, out=out))
    return 2 * m * k * n / seconds / 1e9


def bandwidth_gbs(kind: str, threads: int, mib: int = 256) -> float:
    torch.set_num_threads(threads)
    n = mib * 2**20 // FLOAT_BYTES
    a, b, c = torch.ones(n), torch.ones(n), torch.empty(n)
    if kind == "copy":
        seconds, moved = best_seconds(lambda: c.copy_(a), min_time=0.5, trials=3), 2 * n * FLOAT_BYTES
    else:
        seconds, moved = best_seconds(lambda: torch.add(a, b, out=c), min_time=0.5, trials=3), 3 * n * FLOAT_BYTES
    return moved / seconds / 1e9


def measure_peaks(max_threads: int) -> dict:
    thread_counts = [t for t in (1, 2) if t <= max_threads]
    peaks: dict = {"matmul": [], "bandwidth": []}
    for threads in thread_counts:
        for shape in ((2048, 2048, 2048), (4096, 4096, 4096), (32, 784, 200)):
            gflops = matmul_gflops(*shape, threads)
            peaks["matmul"].append({"shape": "x".join(map(str, shape)), "threads": threads, "gflops": gflops})
            print(f"roofline: peak matmul {'x'.join(map(str, shape)):>14s} {threads} thread(s): {gflops:7.1f} GFLOP/s",
                  flush=True)
        for kind in ("copy", "add"):
            gbs = bandwidth_gbs(kind, threads)
            peaks["bandwidth"].append({"kind": kind, "threads": threads, "gbs": gbs})
            print(f"roofline: bandwidth {kind:4s} 256 MiB {threads} thread(s): {gbs:6.1f} GB/s", flush=True)
    torch.set_num_threads(1)

    def best(rows, key, threads, square_only=False):
        pick = [r[key] for r in rows if r["threads"] == threads and (not square_only or r["shape"] != "32x784x200")]
        return max(pick) if pick else None

    top = max(thread_counts)
    peaks["flops_peak_1"] = best(peaks["matmul"], "gflops", 1, True) * 1e9
    peaks["flops_peak"] = best(peaks["matmul"], "gflops", top, True) * 1e9
    peaks["bandwidth_rows"] = peaks.pop("bandwidth")
    peaks["bandwidth_1"] = best(peaks["bandwidth_rows"], "gbs", 1) * 1e9
    peaks["bandwidth_peak"] = best(peaks["bandwidth_rows"], "gbs", top) * 1e9
    peaks["threads"] = top
    return peaks


# --- implementations' times --------------------------------------------------------------------------

def run_impl(impl: str, model: str, rounds: int) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if impl == "floor":
        command = [sys.executable, "impl_floor.py", model, str(rounds)]
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    else:
        command = [sys.executable, "impl_fedhet.py", model, impl.split("-", 1)[1], str(rounds)]
    result = subprocess.run(command, cwd=HERE, env=env, capture_output=True, text=True)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    record = {"impl": impl, "model": model, "rounds": rounds, "command": "cd benchmarks && " + shlex.join(command)}
    if result.returncode == 0 and lines:
        data = json.loads(lines[-1][len("RESULT "):])
        record.update(wall_seconds=data["wall_seconds"], seconds_per_round=data["wall_seconds"] / rounds,
                      backend=data.get("backend"))
    else:
        record["error"] = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["failed"]
    return record


def measured_times(models: list[str], impls: list[str], rounds: dict[str, int]) -> list[dict]:
    records = []
    for model in models:
        for impl in impls:
            record = run_impl(impl, model, rounds[model])
            records.append(record)
            shown = f"{record['seconds_per_round']:.3f} s/round" if "seconds_per_round" in record else f"FAILED {record['error']}"
            print(f"roofline: {model} {impl:18s} {rounds[model]} rounds: {shown}", flush=True)
    return records


def times_from_results(models: list[str]) -> list[dict]:
    records = []
    files = sorted((HERE / "results").glob("w-*.json"), reverse=True)
    for model in models:
        for path in files:
            data = json.loads(path.read_text())
            rows = [r for r in data["summary"] if r["model"] == model and "seconds_per_round" in r]
            if rows:
                for row in rows:
                    records.append({"impl": row["impl"], "model": model, "rounds": data["meta"].get("rounds"),
                                    "seconds_per_round": row["seconds_per_round"], "wall_seconds": row["wall_seconds"],
                                    "command": data["meta"]["command"],
                                    "source": f"{path.relative_to(HERE.parent)} ({data['meta']['machine']})"})
                break
    return records


# --- report -----------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="mlp,cnn")
    parser.add_argument("--rounds", default="mlp=5,cnn=3", help="rounds per measured run, per model")
    parser.add_argument("--impls", default="floor,fedhet-sequential,fedhet-auto")
    parser.add_argument("--from-results", action="store_true", help="take the times from the newest w-*.json instead")
    parser.add_argument("--out", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    command = shlex.join(["python", "benchmarks/roofline.py", *(argv if argv is not None else sys.argv[1:])])
    print(f"roofline: {command}", flush=True)
    models = [m for m in args.models.split(",") if m]
    rounds = {k: int(v) for k, v in (item.split("=") for item in args.rounds.split(","))}
    impls = [i for i in args.impls.split(",") if i]
    started = datetime.datetime.now(datetime.timezone.utc)
    load_start = " ".join(f"{v:.2f}" for v in os.getloadavg())

    work = {}
    for model in models:
        work[model] = count_round(W.make_model(model))
        c = work[model]
        print(f"roofline: {model}: d = {c['parameters']:,}, forward {c['forward_flops_per_example'] / 1e6:.3f} MFLOP/example, "
              f"{c['flops'] / 1e9:.2f} GFLOP and {c['bytes'] / 1e9:.2f} GB per round", flush=True)

    peaks = measure_peaks(len(os.sched_getaffinity(0)))
    times = times_from_results(models) if args.from_results else measured_times(models, impls, rounds)

    rows = []
    for record in times:
        c = work[record["model"]]
        limit = max(c["flops"] / peaks["flops_peak"], c["bytes"] / peaks["bandwidth_peak"])
        limit_1 = max(c["flops"] / peaks["flops_peak_1"], c["bytes"] / peaks["bandwidth_1"])
        row = dict(record)
        if "seconds_per_round" in record:
            row.update(limit_seconds=limit, limit_seconds_1thread=limit_1,
                       times_limit=record["seconds_per_round"] / limit,
                       times_limit_1thread=record["seconds_per_round"] / limit_1,
                       achieved_gflops=c["flops"] / record["seconds_per_round"] / 1e9)
        rows.append(row)

    meta = {"date": started.isoformat(timespec="seconds"), "machine": machine(f"torch {torch.__version__}"), "command": command,
            "load_start": load_start, "load_end": " ".join(f"{v:.2f}" for v in os.getloadavg()),
            "times_from": "w-*.json (--from-results)" if args.from_results else "measured now, one run each"}
    text = markdown(meta, work, peaks, rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = started.strftime("%Y%m%d-%H%M%S")
    (out / f"roofline-{stamp}.json").write_text(json.dumps({"meta": meta, "work": work, "peaks": peaks, "rows": rows}, indent=1))
    (out / f"roofline-{stamp}.md").write_text(text)
    print(text)
    print(f"roofline: wrote {out / f'roofline-{stamp}.md'} and .json")
    return 0


def markdown(meta, work, peaks, rows) -> str:
    lines = [f"# Roofline of workload W, {meta['date']}", "", f"Machine: {meta['machine']}; load average "
             f"{meta['load_start']} at start, {meta['load_end']} at end.", "", f"Command: `{meta['command']}`; "
             f"implementations' times: {meta['times_from']}.", "", "## Peaks (measured by this script)", "",
             "| float32 `torch.mm` | 1 thread GFLOP/s | 2 threads GFLOP/s |", "| --- | ---: | ---: |"]
    for shape in dict.fromkeys(r["shape"] for r in peaks["matmul"]):
        cells = [next((f"{r['gflops']:.1f}" for r in peaks["matmul"] if r["shape"] == shape and r["threads"] == t), "-")
                 for t in (1, 2)]
        lines.append(f"| {shape} | {cells[0]} | {cells[1]} |")
    lines += ["", "| memory, 256 MiB tensors (bytes read + written) | 1 thread GB/s | 2 threads GB/s |", "| --- | ---: | ---: |"]
    for kind in ("copy", "add"):
        cells = [next((f"{r['gbs']:.1f}" for r in peaks["bandwidth_rows"] if r["kind"] == kind and r["threads"] == t), "-")
                 for t in (1, 2)]
        lines.append(f"| {kind} | {cells[0]} | {cells[1]} |")
    lines += ["", f"Roofline peaks used: {peaks['flops_peak'] / 1e9:.1f} GFLOP/s and {peaks['bandwidth_peak'] / 1e9:.1f} GB/s "
              f"({peaks['threads']} threads); one thread: {peaks['flops_peak_1'] / 1e9:.1f} GFLOP/s, "
              f"{peaks['bandwidth_1'] / 1e9:.1f} GB/s.", "", "## Work per round (counted from the model and the config)", "",
              "| model | parameters | fwd MFLOP/example | training GFLOP | eval GFLOP | GFLOP/round | GB/round (params, activations, eval) "
              "| FLOP/byte | limit s/round (2 thr) | bound | limit s/round (1 thr) |", "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- | ---: |"]
    for model, c in work.items():
        compute, memory = c["flops"] / peaks["flops_peak"], c["bytes"] / peaks["bandwidth_peak"]
        limit_1 = max(c["flops"] / peaks["flops_peak_1"], c["bytes"] / peaks["bandwidth_1"])
        lines.append(f"| {model} | {c['parameters']:,} | {c['forward_flops_per_example'] / 1e6:.3f} | {c['train_flops'] / 1e9:.2f} "
                     f"| {c['eval_flops'] / 1e9:.2f} | {c['flops'] / 1e9:.2f} | {c['bytes'] / 1e9:.2f} ({c['param_bytes'] / 1e9:.2f}, "
                     f"{c['activation_bytes'] / 1e9:.2f}, {c['eval_bytes'] / 1e9:.2f}) | {c['flops'] / c['bytes']:.1f} "
                     f"| {max(compute, memory):.4f} | {'compute' if compute >= memory else 'memory'} | {limit_1:.4f} |")
    lines += ["", "## Implementations against the limit", "",
              "| model | implementation | s/round | GFLOP/s achieved | x roofline limit (2 thr) | x limit (1 thr) | source |",
              "| --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        if "seconds_per_round" not in r:
            lines.append(f"| {r['model']} | {r['impl']} | failed: {r.get('error')} | | | | |")
            continue
        source = r.get("source") or f"`{r['command']}` ({r['rounds']} rounds)"
        impl = r["impl"] + (f" (= {r['backend']})" if r.get("backend") and r["impl"].endswith("auto") else "")
        lines.append(f"| {r['model']} | {impl} | {r['seconds_per_round']:.3f} | {r['achieved_gflops']:.1f} "
                     f"| {r['times_limit']:.2f} | {r['times_limit_1thread']:.2f} | {source} |")
    lines += ["", "x limit = measured seconds per round / roofline seconds per round (1.00 would be the hardware "
              "limit). The byte model ignores caches and the FLOP model per-step overhead: see the docstring of "
              "`benchmarks/roofline.py`."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
