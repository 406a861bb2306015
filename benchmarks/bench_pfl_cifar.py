"""pfl-research's CIFAR-10 benchmark configuration, run by fedhet on synthetic CIFAR-shaped data.

pfl-research (Granqvist et al. 2024, arXiv:2404.06430) times simulators on CIFAR-10 with its
``image_classification/configs/baseline.yaml``: 50,000 images over 1,000 users of 50 (IID), a cohort
of 50 users a round, 1,500 central iterations, one local epoch of batch 10 (5 local steps) at local
learning rate 0.1, FedAvg with central learning rate 1, evaluation of the 10,000 test images (one
batch) every 10 iterations, and its ``simple_cnn`` (fedhet's ``pfl_cnn``, 1,626,442 parameters).

The real CIFAR-10 cannot be fetched here, so the images are synthetic: uniform random bytes and
labels in the official ``cifar-10-batches-py`` format, read by fedhet's CIFAR-10 loader. The work per
round (examples, FLOPs, bytes) is the real benchmark's; the accuracy is chance and is not reported as
a result.

Variants (``--variants``): ``vectorized`` trains the model without its dropout layers (the
vectorised backend's model: dropout masks under ``vmap`` cannot match the sequential stream,
``fedhet.backends.vectorized``), ``sequential`` the model with pfl's dropout, one client after another
(what ``auto`` picks for it). Each variant stops after ``--rounds`` rounds or ``--max-seconds``,
whichever comes first; the table says which, and the throughput is over the rounds run.

Figures: client updates per second (cohort x rounds / wall seconds, evaluation included), seconds
per round, and the achieved FLOP rate against the FLOPs a round must do (forward 33.7 MFLOP an
example; training counted as 3x forward; the evaluation's forward passes amortised over its 10
rounds).

Usage (from the repository root; a CUDA GPU is used when present):

    PYTHONPATH=src python benchmarks/bench_pfl_cifar.py [--rounds 1500] [--max-seconds 120]
        [--variants vectorized,sequential] [--device auto] [--out benchmarks/results]

Writes ``pfl-cifar-<timestamp>.json`` and ``.md`` beside the other results.
"""
from __future__ import annotations

import argparse
import json
import pickle
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from machine import machine  # noqa: E402
from result_files import write_results  # noqa: E402

from fedhet.config.schema import load_config  # noqa: E402
from fedhet.engine.callbacks import Callback  # noqa: E402
from fedhet.engine.runner import run_experiment  # noqa: E402

USERS, PER_USER, COHORT, LOCAL_BATCH, LOCAL_LR, EVAL_EVERY, TEST = 1000, 50, 50, 10, 0.1, 10, 10_000
# Forward FLOPs of one 3x32x32 example through simple_cnn: conv 3->32 on 30x30, conv 32->64 on 28x28,
# fc 12,544 -> 128, fc 128 -> 10 (multiply-adds counted as 2).
FORWARD_FLOP = 2 * (30 * 30 * 32 * 27 + 28 * 28 * 64 * 288 + 12_544 * 128 + 128 * 10)


def round_flop() -> float:
    """FLOPs a round must do: 50 clients x 50 examples trained (3x forward) plus a tenth of one
    evaluation of the test set."""
    return COHORT * PER_USER * 3 * FORWARD_FLOP + TEST * FORWARD_FLOP / EVAL_EVERY


def write_synthetic_cifar10(root: Path, seed: int = 0) -> None:
    """``root/cifar-10-batches-py`` in the official pickle format, with random images and labels."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    batch = USERS * PER_USER // 5

    def write(name: str, count: int) -> None:
        data = {b"data": rng.integers(0, 256, size=(count, 3072), dtype=np.uint8),
                b"labels": rng.integers(0, 10, size=count).tolist(), b"batch_label": name.encode()}
        with open(folder / name, "wb") as handle:
            pickle.dump(data, handle)

    for index in range(1, 6):
        write(f"data_batch_{index}", batch)
    write("test_batch", TEST)
    names = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog", b"horse", b"ship", b"truck"]
    with open(folder / "batches.meta", "wb") as handle:
        pickle.dump({b"label_names": names, b"num_cases_per_batch": batch, b"num_vis": 3072}, handle)


class Stopwatch(Callback):
    """Wall seconds from the run's start (data loaded, model built) to each round's end; stops the
    run once ``max_seconds`` have passed."""

    def __init__(self, max_seconds: float):
        self.max_seconds = max_seconds
        self.round_ends: list[float] = []

    def on_run_start(self, run):
        self.started = time.perf_counter()

    def on_round_end(self, run, record):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.round_ends.append(time.perf_counter() - self.started)
        return self.round_ends[-1] >= self.max_seconds


def run_variant(variant: str, data_root: Path, rounds: int, max_seconds: float, device: str) -> dict:
    backend, dropout = {"vectorized": ("vectorized", False), "sequential": ("sequential", True)}[variant]
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="fedhet-pfl-") as out:
        config = load_config(None, [
            "data.name=cifar10", f"data.root={data_root}", "partition.name=iid",
            f"partition.num_clients={USERS}", "model.name=pfl_cnn", f"model.dropout={str(dropout).lower()}",
            "participation.name=uniform", f"participation.clients_per_round={COHORT}",
            "client.name=sgd", f"client.learning_rate={LOCAL_LR}", f"client.batch_size={LOCAL_BATCH}",
            "client.epochs=1", "server.name=fedavg", "server.learning_rate=1.0",
            f"run.rounds={rounds}", f"run.eval_every={EVAL_EVERY}", f"run.eval_batch_size={TEST}",
            f"run.checkpoint_every={rounds}", f"run.backend={backend}", f"run.device={device}",
            "run.progress=false", "run.seed=0", f"run.out_dir={out}", "run.name=pfl_cifar"])
        stopwatch = Stopwatch(max_seconds)
        started = time.perf_counter()
        summary = run_experiment(config, callbacks=[stopwatch], log=notes.append)
    ends = stopwatch.round_ends
    done = len(ends)
    wall = ends[-1]
    steady = (ends[-1] - ends[0]) / max(done - 1, 1)
    return {"variant": variant, "backend": summary.get("backend"), "dropout": dropout, "device": summary.get("device"),
            "rounds_run": done, "rounds_planned": rounds, "stopped_by_time": done < rounds,
            "wall_seconds": wall, "setup_seconds": stopwatch.started - started,
            "first_round_seconds": ends[0], "seconds_per_round": steady,
            "client_updates_per_second": COHORT * done / wall,
            "achieved_tflops": round_flop() * done / wall / 1e12,
            "projected_1500_rounds_seconds": ends[0] + steady * (1500 - 1) if done > 1 else None,
            "notes": [n for n in notes if n.startswith("backend")]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1500)
    parser.add_argument("--max-seconds", type=float, default=120.0, help="stop a variant after this many seconds")
    parser.add_argument("--variants", default="vectorized,sequential")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--data-dir", type=Path, help="where to write the synthetic data (default: a temporary folder)")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args(argv)

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA GPU"
    line = machine(f"torch {torch.__version__}", gpu)
    with tempfile.TemporaryDirectory(prefix="fedhet-synthetic-cifar-") as tmp:
        root = args.data_dir or Path(tmp)
        write_synthetic_cifar10(root)
        results = []
        for variant in args.variants.split(","):
            result = run_variant(variant, root, args.rounds, args.max_seconds, args.device)
            results.append(result)
            print(json.dumps(result), flush=True)

    record = {"machine": line, "command": " ".join(sys.argv), "round_gflop": round_flop() / 1e9, "results": results}
    rows = [f"pfl-research's CIFAR-10 configuration on synthetic data; {line}",
            f"round: {round_flop() / 1e9:.0f} GFLOP (training 3x forward, evaluation amortised)", "",
            "| variant | backend | rounds | wall s | s/round | client updates/s | TFLOP/s | 1,500 rounds (s, projected) |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        rows.append(f"| {r['variant']} (dropout {'on' if r['dropout'] else 'off'}) | {r['backend']} | "
                    f"{r['rounds_run']}{' (time cap)' if r['stopped_by_time'] else ''} | {r['wall_seconds']:.1f} | "
                    f"{r['seconds_per_round']:.4f} | {r['client_updates_per_second']:.0f} | "
                    f"{r['achieved_tflops']:.2f} | {r['projected_1500_rounds_seconds'] or float('nan'):.0f} |")
    write_results(args.out, "pfl-cifar", record, "\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
