"""Scaling: what a round costs against the cohort size K and the number of clients N, and what the
papers' CIFAR-100 and TinyImageNet presets would need on a 100-node cluster (docs/scaling.md).

Usage (from the repository root, fedhet importable, e.g. ``PYTHONPATH=src``):

    python benchmarks/scaling.py [--rounds 3] [--max-clients 100000] [--out benchmarks/results]
    python benchmarks/scaling.py --reuse-timing RESULT      # parts 1 and 4 again, the timings of RESULT
    python benchmarks/scaling_render.py RESULT              # the Markdown tables of docs/scaling.md

This script measures and writes the result file; ``benchmarks/scaling_render.py`` renders a result file
(the Markdown tables of docs/scaling.md, the two plots), so the docs can be redrawn without measuring.

Four parts, all computed here (nothing is typed in by hand):

1. **Per-client stores** of every method: a 12-client Synthetic run of each algorithm is built and
   its ``[N, d]`` stores counted (the solver's ``client_state_names`` and every
   :class:`fedhet.core.store.ClientStore` in the server's state).
2. **Seconds per round against K** (10 to 200, N = 1,000) and **against N** (100 to 100,000,
   K = 10, per-client stores memory-mapped: ``run.store_mmap``): FedProx's Synthetic(1,1) data with
   every device capped at 50 examples (40 for training), so a client's work is the same at every N;
   logistic regression (d = 610); one local epoch, batch 16 (3 steps); ``sequential`` backend, one
   thread. Methods: FedAvg (no store), SCAFFOLD (a client store), FedAWARE (a server store of
   momenta), FedVarp (a server table). One federation per N is built once and shared by the methods;
   each point is one warm-up round, then the median of ``--rounds`` timed rounds (evaluation not
   included); the time to write a checkpoint (which snapshots every store) is taken once per point.
3. **The per-example training cost on this CPU**: ``benchmarks/cost_curves.py``'s measurement of
   the FedAvg MLP on Fashion-MNIST (achieved GFLOP/s of training, one thread), reused.
4. **The presets on a cluster**: for each CIFAR-100 / TinyImageNet preset under ``configs/papers``,
   the sweep its header names (variants x grid x seeds, planned with ``plan_sweep``), the model's
   parameters ``d`` and training FLOPs per example (``torch.utils.flop_counter``, forward and
   backward of one batch), the expected cohort, local steps, bytes per round per backend (the
   formulas of :func:`round_bytes`), the stores' memory, and the total compute in CPU-core-hours
   (at part 3's measured rate) and GPU-hours (at ``--gpu-tflops``, an assumption), and the wall
   clock on ``--nodes`` nodes with one GPU each.

The machine is shared (other jobs run beside this one), so the timings are noisy: medians, and the
load average is recorded. Writes ``scaling-<timestamp>.json`` under ``--out`` and (through
``scaling_render.write_plots``) the plots ``docs/images/scaling-K.png`` and ``docs/images/scaling-N.png``.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import torch  # noqa: E402

from fedhet.config.schema import ExperimentConfig, load_config, resolve_config  # noqa: E402
from fedhet.core.store import ClientStore  # noqa: E402

import scaling_render  # noqa: E402  (benchmarks/scaling_render.py: the tables and plots of a result file)

VALUE_BYTES = 4                       # float32 parameters, deltas and stores
METHODS = {                           # name -> overrides (part 1 counts the stores of more methods)
    "fedavg": ["algorithm=fedavg"],
    "scaffold": ["algorithm=scaffold"],
    "fedaware": ["algorithm=fedaware"],
    "fedvarp": ["server.name=fedvarp"],
}
INVENTORY = {
    "fedavg": ["algorithm=fedavg"], "fedprox": ["client.name=fedprox"], "scaffold": ["algorithm=scaffold"],
    "feddyn": ["algorithm=feddyn"], "fedadmm": ["algorithm=fedadmm"], "fedspeed": ["algorithm=fedspeed"],
    "fedaware": ["algorithm=fedaware"], "fedvarp": ["server.name=fedvarp"], "mifa": ["server.name=mifa"],
    "fedau": ["server.name=fedau"], "fedadam": ["server.name=fedadam"], "fednova": ["algorithm=fednova"],
}
# The datasets of the presets: input shape, classes, training examples, test examples.
DATASETS = {"cifar100": ((3, 32, 32), 100, 50_000, 10_000), "tinyimagenet": ((3, 64, 64), 200, 100_000, 10_000),
            "cifar10": ((3, 32, 32), 10, 50_000, 10_000)}
PRESETS = ["fedaware_t2_cifar100.toml", "fedau_t1_cifar100.toml", "fedspeed_t1_cifar100_dir06.toml",
           "fedspeed_t1_cifar100_iid.toml", "fedspeed_t1_tinyimagenet_dir06.toml", "fedspeed_t1_tinyimagenet_iid.toml"]


def synthetic(clients: int, per_round: int, extra: list[str] = ()) -> list[str]:
    return ["data.name=synthetic", f"data.num_devices={clients}", "data.max_device_size=50",
            "partition.name=natural", f"partition.num_clients={clients}", "model.name=logreg",
            "participation.name=uniform", f"participation.clients_per_round={per_round}",
            "client.learning_rate=0.05", "client.batch_size=16", "client.epochs=1",
            "run.backend=sequential", "run.device=cpu", "run.progress=false", "run.eval_every=100000",
            "run.checkpoint_every=100000", "run.rounds=1000", *extra]


# --- part 1: stores ---------------------------------------------------------------------------


def _dense_bytes(obj: Any) -> int:
    """Bytes of the tensors in a state that are not per-client stores (FedAWARE's ``[N, N]`` Gram matrix...)."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_dense_bytes(value) for value in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_dense_bytes(value) for value in obj)
    return 0


def _stores_in(obj: Any) -> list[ClientStore]:
    if isinstance(obj, ClientStore):
        return [obj]
    if isinstance(obj, dict):
        return [s for value in obj.values() for s in _stores_in(value)]
    if isinstance(obj, (list, tuple)):
        return [s for value in obj for s in _stores_in(value)]
    return []


def store_counts(config: ExperimentConfig, run_dir: Path) -> dict[str, Any]:
    """The ``[N, d]`` stores of ``config``'s method: built on a 12-client Synthetic federation."""
    from fedhet.engine.runner import RunHandle, build_federation

    small_sections = load_config(None, synthetic(12, 4)).to_dict()
    method = {k: v for k, v in config.to_dict().items() if k in ("algorithm", "participation", "client", "server")}
    small = resolve_config({**small_sections, **method, "run": small_sections["run"]})
    federation = build_federation(small, torch.device("cpu"))
    handle = RunHandle(small, run_dir, federation, log=lambda message: None)
    handle.run_round()          # a store made at the first round (server.aware's momenta) exists after it
    simulator = handle.simulator
    client = sorted(simulator.client_stores)
    server = sorted(store.name for store in _stores_in(simulator.server_state))
    if hasattr(handle.backend, "close"):
        handle.backend.close()
    # The server-side state sent to every client each round (SCAFFOLD's c): vectors of length d.
    broadcast = _dense_bytes(simulator.broadcast) / (simulator.task.spec.dim * simulator.params.element_size())
    return {"client": client, "server": server, "count": len(client) + len(server), "broadcast_vectors": broadcast}


def inventory(work: Path) -> dict[str, Any]:
    out = {}
    for name, overrides in INVENTORY.items():
        try:
            out[name] = store_counts(load_config(None, synthetic(12, 4, overrides)), work / f"inv-{name}")
        except Exception as error:  # noqa: BLE001 - a method that cannot run here is listed, not fatal
            out[name] = {"error": f"{type(error).__name__}: {error}"}
    return out


# --- part 2: seconds per round ----------------------------------------------------------------


def time_point(federation, overrides: list[str], run_dir: Path, rounds: int) -> dict[str, Any]:
    from fedhet.engine.runner import RunHandle

    config = load_config(None, overrides)
    handle = RunHandle(config, run_dir, federation, log=lambda message: None)
    handle.run_round()                                    # warm-up
    seconds = []
    for _ in range(rounds):
        started = time.perf_counter()
        handle.run_round()
        seconds.append(time.perf_counter() - started)
    started = time.perf_counter()
    handle.save_checkpoint()
    checkpoint = time.perf_counter() - started
    stores = list(handle.simulator.client_stores.values()) + _stores_in(handle.simulator.server_state)
    return {"seconds_per_round": statistics.median(seconds), "round_seconds": seconds,
            "checkpoint_seconds": checkpoint, "store_bytes": sum(store.nbytes() for store in stores),
            "checkpoint_bytes": (run_dir / "checkpoint.pt").stat().st_size, "d": handle.task.spec.dim,
            "dense_server_state_bytes": _dense_bytes(handle.simulator.server_state),
            "steps_per_round": config.participation.options.clients_per_round * math.ceil(
                float(handle.task.client_sizes.float().mean()) / config.client.options.batch_size)}


def predicted_bytes(history: list[tuple[int, int]], n: int) -> float:
    """The dense server state at ``n`` clients, by the power law through the last two points."""
    if len(history) < 2 or min(b for _, b in history[-2:]) <= 0 or history[-1][0] == history[-2][0]:
        return float(history[-1][1]) if history else 0.0
    (n0, b0), (n1, b1) = history[-2:]
    exponent = math.log(b1 / b0) / math.log(n1 / n0)
    return b1 * (n / n1) ** exponent


def sweep_points(axis: str, values: list[int], rounds: int, work: Path, max_state_bytes: float) -> list[dict[str, Any]]:
    from fedhet.engine.runner import build_federation

    rows = []
    history: dict[str, list[tuple[int, int]]] = {method: [] for method in METHODS}
    for value in values:
        clients, per_round = (1000, value) if axis == "K" else (value, 10)
        started = time.perf_counter()
        base = load_config(None, synthetic(clients, per_round))
        federation = build_federation(base, torch.device("cpu"))
        setup = time.perf_counter() - started
        for method, overrides in METHODS.items():
            predicted = predicted_bytes(history[method], clients)
            if predicted > max_state_bytes:
                # Not run: it would take the shared machine's memory (FedAWARE's Gram matrix is [N, N]).
                rows.append({"axis": axis, "N": clients, "K": per_round, "method": method, "skipped": True,
                             "predicted_dense_server_state_bytes": predicted})
                print(f"scaling: {axis}: N={clients:<6d} K={per_round:<3d} {method:<8s} not run: its dense server "
                      f"state would take {predicted / 2**30:.1f} GiB", flush=True)
                continue
            run_dir = work / f"{axis}-{value}-{method}"
            run_dir.mkdir(parents=True)
            row = time_point(federation, synthetic(clients, per_round, [*overrides, "run.store_mmap=true"]),
                             run_dir, rounds)
            row.update({"axis": axis, "N": clients, "K": per_round, "method": method, "federation_seconds": setup})
            rows.append(row)
            history[method].append((clients, row["dense_server_state_bytes"]))
            print(f"scaling: {axis}: N={clients:<6d} K={per_round:<3d} {method:<8s} {row['seconds_per_round']:.4f} s/round "
                  f"(rounds {', '.join(f'{s:.4f}' for s in row['round_seconds'])}), checkpoint "
                  f"{row['checkpoint_seconds']:.3f} s / {row['checkpoint_bytes'] / 1e6:.1f} MB, stores "
                  f"{row['store_bytes'] / 1e6:.1f} MB, dense server state {row['dense_server_state_bytes'] / 1e6:.1f} MB",
                  flush=True)
            shutil_rmtree(run_dir)
        del federation
    return rows


def shutil_rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


# --- part 4: the presets on a cluster ---------------------------------------------------------


def round_bytes(d: int, cohort: float, client_stores: int, nodes: int, broadcast: float = 0.0,
                value_bytes: int = VALUE_BYTES) -> dict[str, float]:
    """Bytes that cross a process boundary in one round, per backend (docs/scaling.md, "Cost model").

    - ``sequential`` / ``vectorized``: none (one process; ``vectorized`` keeps ``[K, d]`` on the device).
    - ``processes``: through shared memory: ``x`` once, each client's delta and its client-store rows
      out and back (``(1 + 2 s) K d``).
    - ``ray``: ``x`` and the solver's broadcast (``b`` vectors: SCAFFOLD's ``c``) in one object,
      fetched once per node that runs a client (``min(K, nodes) (1 + b) d``), and per client its store
      rows out, its delta and new rows back (``(1 + 2 s) K d``), over the network.
    """
    per_client = (1 + 2 * client_stores) * cohort * d * value_bytes
    return {"sequential": 0.0, "vectorized": 0.0, "processes": (1 + broadcast) * d * value_bytes + per_client,
            "ray": min(cohort, nodes) * (1 + broadcast) * d * value_bytes + per_client}


def training_flops_per_example(model: torch.nn.Module, input_shape: tuple[int, ...], batch: int,
                               num_classes: int) -> float:
    from torch.utils.flop_counter import FlopCounterMode

    inputs = torch.randn(batch, *input_shape)
    targets = torch.randint(0, num_classes, (batch,))
    counter = FlopCounterMode(display=False)
    with counter:
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        loss.backward()
    return counter.get_total_flops() / batch


def forward_flops_per_example(model: torch.nn.Module, input_shape: tuple[int, ...], batch: int) -> float:
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(torch.randn(batch, *input_shape))
    return counter.get_total_flops() / batch


def header_sweep(path: Path) -> list[str]:
    """The arguments of the ``fedhet sweep`` command in a preset's header comment."""
    for line in path.read_text(encoding="utf-8").splitlines():
        text = line.lstrip("#").strip()
        if text.startswith("fedhet sweep "):
            return shlex.split(text)[2:]
    raise ValueError(f"{path}: no `fedhet sweep` line in the header")


def plan_preset(path: Path):
    from fedhet.lab.sweep.grid import load_variants, parse_grid, parse_seeds
    from fedhet.lab.sweep.plan import plan_sweep

    args = header_sweep(path)
    config, grids, seeds, variants = args[0], [], None, []
    for flag, value in zip(args[1::2], args[2::2]):
        if flag == "--grid":
            grids.append(parse_grid(value))
        elif flag == "--seeds":
            seeds = parse_seeds(value)
        elif flag == "--variants":
            variants = load_variants(ROOT / value)
    return plan_sweep(ROOT / config, grids=grids, seeds=seeds, variants=variants, out_dir=tempfile.gettempdir(),
                      skip_missing=True), args


def expected_cohort(config: ExperimentConfig) -> float:
    options, n = config.participation.options, config.partition.options.num_clients
    if hasattr(options, "clients_per_round"):
        return float(options.clients_per_round)
    if hasattr(options, "ratio"):
        return options.ratio * n
    if hasattr(options, "mean"):            # heterogeneous: E[p_n] = mean (before the floor)
        return max(options.mean, getattr(options, "floor", 0.0)) * n
    return float(n)


def local_steps(config: ExperimentConfig, examples_per_client: float) -> float:
    client = config.client.options
    if client.steps:
        return float(client.steps)
    return client.epochs * math.ceil(examples_per_client / client.batch_size)


def preset_estimate(path: Path, *, nodes: int, gpu_tflops: float, cpu_gflops: float, bandwidth_gbit: float,
                    lr_grid: int, step_overhead: float, work: Path) -> dict[str, Any]:
    """One preset's sweep on a cluster (module docstring, part 4). A run's time is its FLOPs at the
    device's rate plus ``step_overhead`` seconds per local step (the framework's per-step cost,
    measured on the tiny model of part 2, where the FLOPs are negligible)."""
    from fedhet.core.registry import MODELS

    plan, args = plan_preset(path)
    first = plan.runs[0].config
    shape, classes, train, test = DATASETS[first.data.name]
    model = MODELS.get(first.model.name).factory(first.model.options, input_shape=shape, num_classes=classes)
    d = sum(p.numel() for p in model.parameters())
    batch = first.client.options.batch_size
    train_flops = training_flops_per_example(model, shape, batch, classes)
    eval_flops = forward_flops_per_example(model.eval(), shape, 50)
    store_cache: dict[str, dict[str, Any]] = {}
    runs, total_flops, rows = [], 0.0, {}
    for run in plan.runs:
        config = run.config
        n = config.partition.options.num_clients
        cohort = expected_cohort(config)
        per_client = train / n
        steps = local_steps(config, per_client)
        examples = cohort * steps * min(batch, per_client)
        round_flops = examples * train_flops
        evaluations = config.run.rounds / config.run.eval_every
        run_flops = config.run.rounds * round_flops + evaluations * test * eval_flops
        # Options matter (server.aware adds a store): the method is its algorithm, client and server tables.
        key = json.dumps({k: v for k, v in config.to_dict().items() if k in ("algorithm", "client", "server")},
                         sort_keys=True, default=str)
        if key not in store_cache:
            store_cache[key] = store_counts(config, work / f"stores-{len(store_cache)}")
        stores = store_cache[key]
        label = run.label or f"{config.client.name}+{config.server.name}"
        rows.setdefault(label, {"method": label, "client_stores": stores["client"], "server_stores": stores["server"],
                                "store_gib": n * d * VALUE_BYTES * stores["count"] / 2**30,
                                "round_bytes": round_bytes(d, cohort, len(stores["client"]), nodes,
                                                           stores["broadcast_vectors"]),
                                "runs": 0})
        rows[label]["runs"] += 1
        runs.append({"name": run.name, "rounds": config.run.rounds, "flops": run_flops,
                     "steps": config.run.rounds * cohort * steps})
        total_flops += run_flops
    rounds = first.run.rounds
    per_run_flops = total_flops / len(runs)
    overhead_hours = sum(r["steps"] for r in runs) * step_overhead / 3600
    gpu_hours = total_flops / (gpu_tflops * 1e12) / 3600 + overhead_hours
    cpu_hours = total_flops / (cpu_gflops * 1e9) / 3600 + overhead_hours
    worst_bytes = max(row["round_bytes"]["ray"] for row in rows.values())
    # A round's network time on the ray backend (all of a round's bytes through the driver's link).
    network_seconds_per_round = worst_bytes * 8 / (bandwidth_gbit * 1e9)
    run_gpu_hours = gpu_hours / len(runs)
    waves = math.ceil(len(runs) / nodes)
    return {
        "preset": path.name, "sweep": "fedhet sweep " + shlex.join(args), "dataset": first.data.name,
        "model": first.model.name, "d": d, "N": first.partition.options.num_clients,
        "expected_cohort": expected_cohort(first), "batch": batch,
        "local_steps": local_steps(first, train / first.partition.options.num_clients),
        "train_gflop_per_example": train_flops / 1e9, "eval_gflop_per_example": eval_flops / 1e9,
        "rounds": rounds, "runs": len(runs), "methods": list(rows.values()),
        "round_tflop": (per_run_flops - rounds / first.run.eval_every * test * eval_flops) / rounds / 1e12,
        "total_pflop": total_flops / 1e15, "gpu_hours": gpu_hours, "cpu_core_hours": cpu_hours,
        "local_steps_total": sum(r["steps"] for r in runs), "step_overhead_hours": overhead_hours,
        "gpu_hours_with_lr_grid": gpu_hours * lr_grid, "cpu_core_hours_with_lr_grid": cpu_hours * lr_grid,
        "one_run_gpu_hours": run_gpu_hours,
        "wall_hours_one_gpu_per_run": waves * run_gpu_hours,
        "wall_hours_with_lr_grid": math.ceil(len(runs) * lr_grid / nodes) * run_gpu_hours,
        "ray_backend_network_seconds_per_round": network_seconds_per_round,
    }


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per point, after one warm-up round")
    parser.add_argument("--max-clients", type=int, default=100_000, help="largest N of the N sweep")
    parser.add_argument("--nodes", type=int, default=100, help="cluster nodes (one GPU each) for the estimate")
    parser.add_argument("--gpu-tflops", type=float, default=20.0,
                        help="sustained training throughput of one GPU, TFLOP/s (an assumption)")
    parser.add_argument("--bandwidth-gbit", type=float, default=10.0, help="the driver's network link, Gbit/s")
    parser.add_argument("--lr-grid", type=int, default=4, help="learning rates tried per method for tuning")
    parser.add_argument("--max-state-gib", type=float, default=2.0,
                        help="skip a point whose dense server state (predicted from the smaller N) exceeds this")
    parser.add_argument("--skip-timing", action="store_true", help="only parts 1 and 4 (no timed rounds)")
    parser.add_argument("--out", default=str(HERE / "results"))
    parser.add_argument("--reuse-timing", metavar="RESULT",
                        help="take parts 2 and 3 (timings, CPU rate) from an earlier result file; redo parts 1 and 4")
    parser.add_argument("--tables", metavar="RESULT",
                        help="print the Markdown tables of a result file and exit (as scaling_render.py RESULT)")
    args = parser.parse_args(argv)
    if args.tables:
        return scaling_render.main([args.tables])
    command = shlex.join(["python", "benchmarks/scaling.py", *(argv if argv is not None else sys.argv[1:])])
    started = datetime.datetime.now(datetime.timezone.utc)
    print(f"scaling: {command}", flush=True)
    torch.set_num_threads(1)
    from machine import machine as machine_line

    result: dict[str, Any] = {"meta": {"date": started.isoformat(timespec="seconds"), "command": command,
                                       "machine": machine_line(), "load_average_start": os.getloadavg()}}
    with tempfile.TemporaryDirectory(prefix="fedhet-scaling-") as tmp:
        work = Path(tmp)
        result["stores"] = inventory(work)
        for name, row in result["stores"].items():
            print(f"scaling: stores of {name}: {row}", flush=True)
        earlier = json.loads(Path(args.reuse_timing).read_text()) if args.reuse_timing else None
        if earlier is not None:
            result["meta"]["timing_from"] = {"file": args.reuse_timing, **earlier["meta"]}
            result["K"], result["N"] = earlier["K"], earlier["N"]
        elif not args.skip_timing:
            budget = args.max_state_gib * 2**30
            result["K"] = sweep_points("K", [10, 20, 50, 100, 200], args.rounds, work, budget)
            result["N"] = sweep_points("N", [n for n in (100, 1000, 10_000, 100_000) if n <= args.max_clients],
                                       args.rounds, work, budget)
        if earlier is not None:
            result["cpu_training_rate"] = earlier["cpu_training_rate"]
        else:
            import cost_curves

            mlp = cost_curves.seconds_per_round(100, 10, 200, max(2, args.rounds))
            result["cpu_training_rate"] = {"source": "benchmarks/cost_curves.py seconds_per_round(N=100, K=10, "
                                                     "hidden=200)", "achieved_gflops_one_thread": mlp["achieved_gflops"],
                                           "row": mlp}
        cpu_gflops = result["cpu_training_rate"]["achieved_gflops_one_thread"]
        print(f"scaling: CPU training rate (FedAvg MLP, one thread): {cpu_gflops:.2f} GFLOP/s", flush=True)
        # The per-step overhead: FedAvg's seconds per local step on the tiny model (median over K).
        step_overhead = (statistics.median(r["seconds_per_round"] / r["steps_per_round"]
                                           for r in result["K"] if r["method"] == "fedavg" and not r.get("skipped"))
                         if "K" in result else 0.0)
        result["assumptions"] = {"step_overhead_seconds": step_overhead, "nodes": args.nodes, "gpu_tflops": args.gpu_tflops, "bandwidth_gbit": args.bandwidth_gbit,
                                 "lr_grid": args.lr_grid, "value_bytes": VALUE_BYTES}
        result["presets"] = []
        for name in PRESETS:
            estimate = preset_estimate(ROOT / "configs" / "papers" / name, nodes=args.nodes, gpu_tflops=args.gpu_tflops,
                                       cpu_gflops=cpu_gflops, bandwidth_gbit=args.bandwidth_gbit, lr_grid=args.lr_grid,
                                       step_overhead=step_overhead, work=work)
            result["presets"].append(estimate)
            print(f"scaling: {name}: d={estimate['d']:,} runs={estimate['runs']} rounds={estimate['rounds']} "
                  f"{estimate['train_gflop_per_example']:.3f} GFLOP/example, {estimate['round_tflop']:.2f} TFLOP/round, "
                  f"{estimate['total_pflop']:.1f} PFLOP: {estimate['gpu_hours']:,.0f} GPU-h, "
                  f"{estimate['cpu_core_hours']:,.0f} CPU-core-h; wall on {args.nodes} GPUs "
                  f"{estimate['wall_hours_one_gpu_per_run']:.1f} h", flush=True)
    result["meta"]["load_average_end"] = os.getloadavg()
    result["meta"]["total_seconds"] = (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = started.strftime("%Y%m%d-%H%M%S")
    path = out / f"scaling-{stamp}.json"
    path.write_text(json.dumps(result, indent=1, default=str))
    if not args.skip_timing and earlier is None:
        scaling_render.write_plots(result, ROOT / "docs" / "images")
    print(f"scaling: wrote {path} ({result['meta']['total_seconds']:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
