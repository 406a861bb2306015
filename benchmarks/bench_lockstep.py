"""Lockstep runs against runs alone: torch operators dispatched and host seconds per run-round.

The workload is one claims protocol's arm, fedaware_dir01's FedAvg (configs/claims/protocols.toml:
Fashion-MNIST, the FedAvg MLP 784-200-200-10, Dir(0.1) over 100 clients, 10 a round, batch 64, eta_l
0.01, float32), as a tuning grid: R runs of one seed that differ in the local learning rate (eta_l x
2^(i/8 - 4), per-row learning rates in lockstep). ``--quick`` takes the protocol's quick tier (one
local epoch), the default its regime (three).

- **solo**: each run alone on the protocol's backend (``sequential``), one round after another;
- **lockstep**: the R runs as one :class:`fedhet.engine.lockstep.LockstepGroup` (each round one
  batched computation of every run's clients, then each run's own server step).

A run-round is one simulator round (participation, local training, server step and its checks; no
evaluation, measured apart). Each configuration runs ``--warmup`` rounds, then
``--rounds`` rounds whose aten operators are counted by a ``TorchDispatchMode`` in every thread (the
torch profiler records only the thread that starts it, and a lockstep group's runs are threads; solo's
profiler ``aten::`` event count, nested events included, is recorded too), then as many rounds again
for the seconds: CPU seconds of the process on a CPU (the machine may be shared), CUDA-synchronised
wall seconds on a GPU, divided by the run-rounds. Solo's operators and
seconds per run-round do not depend on R; they are measured on ``--solo-runs`` runs. The example
slots lockstep's batches compute against their real examples say what padding costs (1.00: ragged
batches compute no padded slot; docs/design.md, "Lockstep runs").

Evaluation, for the largest R: the test set (10,000 examples) evaluated for R models, each alone
(:func:`fedhet.core.task.evaluate`, as a run alone does) against one batched evaluation of all R
(:func:`fedhet.backends.batched_eval.evaluate_runs`, as a lockstep group does), seconds per run
evaluation (the median of three), and the largest difference of a run's loss between the two.

Usage (from the repository root): ``PYTHONPATH=src python benchmarks/bench_lockstep.py [--quick]
[--runs 1,8,64] [--device cpu|cuda] [--out benchmarks/results]``. Writes ``lockstep-<timestamp>.json``
and ``.md``; the last line printed is ``ops per run-round: solo A, lockstep B (R runs), ratio A/B``
for the largest R.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from machine import machine  # noqa: E402
from result_files import write_results  # noqa: E402

from fedhet.algorithms import build as build_algorithm  # noqa: E402
from fedhet.backends.batched_eval import evaluate_runs  # noqa: E402
from fedhet.backends.sequential import SequentialBackend  # noqa: E402
from fedhet.config.schema import load_config  # noqa: E402
from fedhet.core.task import evaluate  # noqa: E402
from fedhet.engine.assembly import simulator_from_config  # noqa: E402
from fedhet.engine.lockstep import LockstepGroup  # noqa: E402
from fedhet.engine.runner import build_federation  # noqa: E402

BASE = HERE.parent / "configs" / "claims" / "base" / "fmnist_dir01_uniform.toml"
ARM = ["server.name=fedavg", "server.learning_rate=0.5", "run.seed=1", "data.download=false"]


def configs(count: int, epochs: int, device: str):
    return [load_config(BASE, [*ARM, f"client.epochs={epochs}", f"run.device={device}",
                               f"client.learning_rate={0.01 * 2 ** (i / 8 - 4):.6g}"]) for i in range(count)]


def simulators(configs_, federation, backend_of):
    """One simulator per config on one shared federation (one seed: one partition, one dataset copy)."""
    return [simulator_from_config(c, federation, algorithm=build_algorithm(c), backend=backend_of())
            for c in configs_]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class OpCounter(TorchDispatchMode):
    """Counts the aten operators dispatched in this thread while it is active."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def counted(body, counters: list):
    """``body`` run under an :class:`OpCounter` of its own (dispatch modes are per thread)."""
    def run():
        counter = OpCounter()
        counters.append(counter)
        with counter:
            return body()
    return run


def profiled_ops(step) -> int:
    """aten events the torch profiler records (this thread's only: a lockstep group's runs are threads)."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    return sum(1 for event in prof.events() if event.name.startswith("aten::"))


def timed(step, device: torch.device) -> float:
    """CPU seconds of this process on a CPU (the machine may be shared), CUDA-synchronised wall
    seconds on a GPU."""
    clock = time.process_time if device.type == "cpu" else time.perf_counter
    synchronize(device)
    started = clock()
    step()
    synchronize(device)
    return clock() - started


def measure_solo(configs_, federation, rounds: int, warmup: int, device: torch.device) -> dict:
    sims = simulators(configs_, federation, SequentialBackend)

    def step():
        for sim in sims:
            for _ in range(rounds):
                sim.run_round()
    for sim in sims:
        for _ in range(warmup):
            sim.run_round()
    run_rounds = len(sims) * rounds
    counters: list[OpCounter] = []
    counted(step, counters)()
    profiler_ops = profiled_ops(step)
    seconds = timed(step, device)
    return {"runs": len(sims), "run_rounds": run_rounds, "ops_per_run_round": counters[0].count / run_rounds,
            "profiler_events_per_run_round": profiler_ops / run_rounds, "seconds_per_run_round": seconds / run_rounds}


def measure_lockstep(configs_, federation, rounds: int, warmup: int, device: torch.device) -> dict:
    group = LockstepGroup()
    sims = simulators(configs_, federation, lambda: group.member(SequentialBackend()))

    def phase(count, counters=None):
        def step():
            bodies = [lambda sim=sim: [sim.run_round() for _ in range(count)] for sim in sims]
            if counters is not None:
                bodies = [counted(body, counters) for body in bodies]
            failed = [o for o in group.run(bodies) if isinstance(o, BaseException)]
            if failed:
                raise failed[0]
        return step
    if warmup:
        phase(warmup)()
    before = (group.stats.examples, group.stats.slots)
    run_rounds = len(sims) * rounds
    counters: list[OpCounter] = []
    phase(rounds, counters)()
    examples, slots = group.stats.examples - before[0], group.stats.slots - before[1]
    seconds = timed(phase(rounds), device)
    return {"runs": len(sims), "run_rounds": run_rounds,
            "ops_per_run_round": sum(c.count for c in counters) / run_rounds,
            "seconds_per_run_round": seconds / run_rounds, "padding": slots / max(examples, 1)}


def measure_evaluation(configs_, federation, device: torch.device) -> dict:
    """Seconds per run evaluation of the test set: each model alone against all models batched."""
    task, batch_size = federation.task, configs_[0].run.eval_batch_size
    start = task.spec.flatten(task.model, dtype=task.dtype).to(device)
    generator = torch.Generator().manual_seed(0)
    params = [start + 0.01 * torch.randn(start.shape, generator=generator, dtype=start.dtype).to(device)
              for _ in configs_]
    outcome: dict = {}

    def alone():
        outcome["alone"] = [evaluate(task, p, batch_size=batch_size) for p in params]

    def together():
        outcome["together"] = evaluate_runs([task] * len(params), params, batch_size)
    alone()                 # the task's pass size is measured on its first evaluation
    seconds = {name: sorted(timed(step, device) for _ in range(3))[1] for name, step in
               (("alone", alone), ("together", together))}
    difference = max(abs(a[0] - b[0]) for a, b in zip(outcome["alone"], outcome["together"]))
    return {"runs": len(params), "seconds_per_run_alone": seconds["alone"] / len(params),
            "seconds_per_run_batched": seconds["together"] / len(params), "largest_loss_difference": difference,
            "same_accuracies": [a[1] for a in outcome["alone"]] == [b[1] for b in outcome["together"]]}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one local epoch (the protocol's quick tier), 1 round")
    parser.add_argument("--runs", default="1,8,64", help="lockstep group sizes (default 1,8,64)")
    parser.add_argument("--solo-runs", type=int, default=2, help="runs measured alone (per run-round figures)")
    parser.add_argument("--rounds", type=int, default=None, help="measured rounds (default 1 quick, 2 otherwise)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="unmeasured rounds first (default 1: a run's one-off checks and set-up stay out)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, or both (cpu,cuda)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1: a sweep's run)")
    parser.add_argument("--out", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    epochs = 1 if args.quick else 3
    rounds = args.rounds or (1 if args.quick else 2)
    warmup = args.warmup if args.warmup is not None else 1
    sizes = [int(size) for size in args.runs.split(",")]
    devices = [d for d in args.device.split(",") if d != "cuda" or torch.cuda.is_available()]
    record = {"machine": machine(f"torch {torch.__version__}", f"{args.threads} torch thread(s)"),
              "command": " ".join(sys.argv), "epochs": epochs, "rounds": rounds, "warmup": warmup,
              "results": []}
    lines = [f"# Lockstep runs: fedaware_dir01 FedAvg arm, {epochs} local epoch(s), {rounds} measured round(s)", "",
             f"Machine: {record['machine']}", "",
             "| device | mode | runs | ops / run-round | s / run-round | computed slots / example |",
             "| --- | --- | --- | --- | --- | --- |"]
    last = None
    for name in devices:
        device = torch.device(name)
        configs_ = configs(max(sizes + [args.solo_runs]), epochs, name)
        federation = build_federation(configs_[0], device)
        solo = measure_solo(configs_[:args.solo_runs], federation, rounds, warmup, device)
        record["results"].append({"device": name, "mode": "solo", **solo})
        lines.append(f"| {name} | solo | {solo['runs']} | {solo['ops_per_run_round']:,.0f} | "
                     f"{solo['seconds_per_run_round']:.3f} | 1 |")
        print(lines[-1], flush=True)
        for size in sizes:
            lock = measure_lockstep(configs_[:size], federation, rounds, warmup, device)
            record["results"].append({"device": name, "mode": "lockstep", **lock})
            lines.append(f"| {name} | lockstep | {size} | {lock['ops_per_run_round']:,.0f} | "
                         f"{lock['seconds_per_run_round']:.3f} | {lock['padding']:.2f} |")
            print(lines[-1], flush=True)
            last = (name, solo, lock)
        evaluation = measure_evaluation(configs_[:max(sizes)], federation, device)
        record["results"].append({"device": name, "mode": "evaluation", **evaluation})
        lines.append(f"| {name} | evaluation alone / batched | {evaluation['runs']} | | "
                     f"{evaluation['seconds_per_run_alone']:.4f} / {evaluation['seconds_per_run_batched']:.4f} "
                     f"s per run evaluation | loss difference {evaluation['largest_loss_difference']:.1e}, "
                     f"accuracies {'equal' if evaluation['same_accuracies'] else 'differ'} |")
        print(lines[-1], flush=True)
    assert last is not None
    name, solo, lock = last
    ratio = solo["ops_per_run_round"] / lock["ops_per_run_round"]
    summary = (f"ops per run-round: solo {solo['ops_per_run_round']:,.0f}, lockstep {lock['ops_per_run_round']:,.0f} "
               f"({lock['runs']} runs), ratio {ratio:.1f}")
    record["summary"] = summary
    lines += ["", f"seconds per run-round ({name}): solo {solo['seconds_per_run_round']:.3f}, lockstep "
              f"{lock['seconds_per_run_round']:.3f} ({lock['runs']} runs), ratio "
              f"{solo['seconds_per_run_round'] / lock['seconds_per_run_round']:.2f}", "", summary]
    write_results(Path(args.out), "lockstep", record, "\n".join(lines))


if __name__ == "__main__":
    main()
