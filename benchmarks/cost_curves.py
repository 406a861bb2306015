"""Cost curves: fedhet's seconds per round against cohort size K, number of clients N and model size d.

Usage (from the repository root, fedhet importable, e.g. ``PYTHONPATH=src``):

    python benchmarks/cost_curves.py [--rounds 3] [--out benchmarks/results]

Every point is one in-process ``run_experiment`` of workload W's set-up (Fashion-MNIST, IID, plain
SGD lr 0.05, batch 32, one local epoch, FedAvg, the MLP) on the ``sequential`` backend (one
thread), varying one knob from W's defaults (N = 100, K = 10, hidden 200-200):

- K in {5, 10, 20, 40} clients per round (N = 100);
- N in {100, 1000, 10000} clients, the same 60,000 training images split finer (600, 60 and 6 per
  client), K = 10: a round trains K * 60000 / N examples;
- d: the MLP's two hidden widths in {50, 200, 800} (d = 42,310 / 199,210 / 1,276,810), K = 10, N = 100.

The clock covers only the round loop: it starts at the end of round 1 (a warm-up round) and stops at
the end of round ``1 + rounds``, after which the run is stopped. Test-set evaluation is left out of
the timed rounds (``run.eval_every`` larger than the run), so the curves show the training cost;
one evaluation of the 10,000 test images is a constant per round on top when ``eval_every = 1``.

Writes ``cost-curves-<timestamp>.json`` and ``.png`` (3 panels) under ``--out``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import workload as W  # noqa: E402
from fedhet.config.schema import load_config  # noqa: E402
from fedhet.engine.callbacks import Callback  # noqa: E402
from fedhet.engine.runner import run_experiment  # noqa: E402


class RoundClock(Callback):
    """Times rounds 2 .. 1 + timed (round 1 is the warm-up), then stops the run."""

    def __init__(self, timed: int):
        self.timed, self.marks = timed, []

    def on_round_end(self, run, record):
        self.marks.append(time.perf_counter())
        return len(self.marks) > self.timed


def seconds_per_round(clients: int, per_round: int, hidden: int, rounds: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="fedhet-cost-") as out:
        config = load_config(None, [
            "data.name=fmnist", f"data.root={W.data_dir()}", "partition.name=iid",
            f"partition.num_clients={clients}", "model.name=mlp", f"model.hidden=[{hidden}, {hidden}]",
            "participation.name=uniform", f"participation.clients_per_round={per_round}",
            "client.name=sgd", f"client.learning_rate={W.LEARNING_RATE}", f"client.batch_size={W.BATCH_SIZE}",
            f"client.epochs={W.LOCAL_EPOCHS}", "server.name=fedavg", "server.learning_rate=1.0",
            f"run.rounds={rounds + 2}", f"run.eval_every={rounds + 10}", f"run.checkpoint_every={rounds + 10}",
            "run.backend=sequential", "run.device=cpu", "run.progress=false", f"run.seed={W.SEED}",
            f"run.out_dir={out}", "run.name=cost"])
        clock = RoundClock(rounds)
        run_experiment(config, callbacks=[clock], log=lambda message: None)
    per = [b - a for a, b in zip(clock.marks, clock.marks[1:])][:rounds]
    d = 784 * hidden + hidden + hidden * hidden + hidden + hidden * 10 + 10
    examples = per_round * (60000 // clients) * W.LOCAL_EPOCHS
    # Counted as in roofline.py: forward 2 * MACs per example, training 3x forward.
    train_flops = 3 * 2 * (784 * hidden + hidden * hidden + hidden * 10) * examples
    seconds = sum(per) / len(per)
    return {"N": clients, "K": per_round, "hidden": hidden, "d": d, "rounds_timed": len(per),
            "seconds_per_round": seconds, "round_seconds": per, "examples_per_round": examples,
            "steps_per_round": per_round * -(-(60000 // clients) // W.BATCH_SIZE) * W.LOCAL_EPOCHS,
            "train_gflop_per_round": train_flops / 1e9, "achieved_gflops": train_flops / seconds / 1e9}


def plot(points: dict, path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    panels = [("K", "cohort size K (N = 100, d = 199,210)", points["K"], False),
              ("N", "clients N, 60,000 images split finer (K = 10)", points["N"], True),
              ("d", "parameters d (MLP hidden width 50/200/800)", points["d"], True)]
    for ax, (key, label, rows, log_x) in zip(axes, panels):
        xs = [r[key] for r in rows]
        ys = [r["seconds_per_round"] for r in rows]
        ax.plot(xs, ys, "o-")
        for x, y in zip(xs, ys):
            ax.annotate(f"{y:.3f} s", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
        if log_x:
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("seconds per round")
        ax.grid(True, alpha=0.3)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per point, after one warm-up round")
    parser.add_argument("--out", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    command = shlex.join(["python", "benchmarks/cost_curves.py", *(argv if argv is not None else sys.argv[1:])])
    started = datetime.datetime.now(datetime.timezone.utc)
    print(f"cost_curves: {command}", flush=True)
    grid = {"K": [(100, k, 200) for k in (5, 10, 20, 40)],
            "N": [(n, 10, 200) for n in (100, 1000, 10000)],
            "d": [(100, 10, h) for h in (50, 200, 800)]}
    points: dict[str, list[dict]] = {}
    for key, settings in grid.items():
        points[key] = []
        for clients, per_round, hidden in settings:
            t0 = time.perf_counter()
            row = seconds_per_round(clients, per_round, hidden, args.rounds)
            row["process_seconds"] = time.perf_counter() - t0
            points[key].append(row)
            print(f"cost_curves: {key}: N={clients:<6d} K={per_round:<3d} hidden={hidden:<4d} d={row['d']:>9,d} "
                  f"{row['seconds_per_round']:.4f} s/round, {row['examples_per_round']} examples in {row['steps_per_round']} steps, "
                  f"{row['achieved_gflops']:.1f} GFLOP/s (rounds {', '.join(f'{s:.4f}' for s in row['round_seconds'])}; "
                  f"{row['process_seconds']:.1f} s with set-up)", flush=True)
    cpu = platform.processor()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    meta = {"date": started.isoformat(timespec="seconds"), "command": command,
            "machine": f"{cpu}, {len(os.sched_getaffinity(0))} usable CPUs, Python {platform.python_version()}",
            "backend": "sequential", "timed_rounds": args.rounds, "warm_up_rounds": 1, "evaluation": "not in the timed rounds",
            "total_seconds": (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = started.strftime("%Y%m%d-%H%M%S")
    (out / f"cost-curves-{stamp}.json").write_text(json.dumps({"meta": meta, "points": points}, indent=1))
    plot(points, out / f"cost-curves-{stamp}.png",
         f"fedhet sequential, MLP on Fashion-MNIST, {args.rounds} rounds after 1 warm-up, {meta['date']}, {meta['machine']}")
    print(f"cost_curves: wrote {out / f'cost-curves-{stamp}.json'} and .png ({meta['total_seconds']:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
