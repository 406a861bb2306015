"""The claims workload's cost. By default the tier's compute floor, counted without training
(:mod:`claims_floor`: every run's FLOPs per layer over all its drawn rounds, against this machine's
float32 peak and small-shape rates measured at run time; writes ``claims-floor-<timestamp>.json/.md``).
With ``--measure``, the measured cost breakdown below: CPU seconds per protocol split into start-up,
local training, server step, evaluation and I/O, and each protocol's round against its roofline.

Usage (from the repository root, fedhet importable, e.g. ``PYTHONPATH=src``):

    python benchmarks/claims_cost.py [--tier default] [--runs CLAIMS_OUT] [--tier-wall S] [--quick]
    python benchmarks/claims_cost.py --measure [--rounds 3] [--protocols fedaware_dir01,fedau_bernoulli]
        [--methods fedavg,fedaware] [--seeds 3] [--out benchmarks/results]

The rest of this docstring is the ``--measure`` mode.

**The workload.** The protocols, their methods (``same_as`` and ``methods_from`` resolved), base files and
seeds come from ``configs/claims`` (``--claims-dir``) as ``fedhet claims run`` reads them
(:mod:`fedhet.lab.claims.definitions`), with the default tier's values. Where a protocol there were below the
paper regime of issue 21, the regime's values would be applied on top (:data:`REGIME`: FedAWARE family
``eta_l = 0.01``, 3 epochs of batch 64, T = 300; FedSpeed 5 epochs, ``eta_l = 0.1``, T = 300; FedAU 5 steps
of batch 16, T = 1,000; today every protocol file meets it). The evaluations of a run are the ones its
configuration schedules (:func:`evaluation_plan`: ``run.eval_every``, the last round, the global-train-loss
rounds): 300 of the test set plus the 10% validation split in a T = 300 run (``eval_every = 1``), 200 of the
test set and one pass over the training set in a FedAU run (``eval_every = 5``). (Until 2026-11-25 this
script counted issue 21's planned window, 57 and 110 evaluations, not what the protocol files run: it
understated evaluation by about 2,500 CPU s over the tier.)

**How it is measured.** Each (protocol, method) runs ``--rounds`` rounds (default 4; FedAU ``--rounds-fedau``,
default 20) as the sweep runs it:
a fresh ``python`` process (``--child``), one torch thread, ``run_experiment`` into a scratch directory.
The child times, in CPU seconds of its own process (``time.process_time``; the machine is shared, and
CPU time is disturbed less by other jobs than wall time): start-up (interpreter, imports, data, partition,
model and the run's first files, up to the start of round 1), then per round the backend's
``train_cohort`` (local training), the server's ``step``, every ``evaluate`` call (evaluation) and the
per-round callbacks that write files (``metrics.jsonl``, checkpoints: I/O), and the end of the run (the
summary and the plots: I/O). The rest of a round (participation, client-state stores, diagnostics) is
"other". The first round is left out of the per-round means (lazy initialisation). The checkpoint a short
run writes at its last round is counted once per ``run.checkpoint_every`` rounds. Then a second run (the
next seed, one round) in the same process gives the start-up of a serving sweep worker
(``fedhet.lab.sweep.worker --serve``: imports done, the dataset cached).

**Extrapolation.** Per run: ``start-up + T * (train + server + other + io) + evaluated examples * eval cost
per example + end``;
per protocol: methods x seeds runs; the tier: the sum, and its wall time on ``--jobs`` cores (the sweep's
one run per core) assuming perfect packing.

**Roofline of a round** (its local training): the FLOPs of :mod:`flop_count` (per layer, the first layer
without its input gradient, the solver's gradients per step) for the mean local steps measured in the
rounds at the configured batch, and the bytes of ``benchmarks/roofline.py``'s ``count_round``,
against this machine's one-thread float32 matmul peak and copy bandwidth, measured here in CPU seconds
(:func:`one_thread_peaks`), since each sweep job runs one thread. Two ratios: local training against it,
and the whole round but its evaluation (server step, checkpoints, bookkeeping included) against it.

Writes ``claims-cost-<timestamp>.json`` and ``.md`` under ``--out`` and prints the table, with the
machine line and the load average before and after (the machine may be shared with other jobs).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from machine import machine  # noqa: E402

REPO = HERE.parent
DEFAULT_CLAIMS_DIR = REPO / "configs" / "claims"

# Issue 21's paper regime for the default tier, per protocol (applied on top of protocols.toml).
_FEDAWARE = {"run.rounds": 300, "client.learning_rate": 0.01, "client.epochs": 3, "client.batch_size": 64}
REGIME: dict[str, dict[str, Any]] = {
    "fedaware_dir01": _FEDAWARE,
    "fedaware_shards": _FEDAWARE,
    # Hybrid+ keeps its own heterogeneous epochs and batch sizes (the base file's distributions).
    "fedaware_hybrid_plus": {"run.rounds": 300, "client.learning_rate": 0.01},
    "fedspeed_dir06": {"run.rounds": 300, "client.learning_rate": 0.1, "client.epochs": 5},
    "fedau_bernoulli": {"run.rounds": 1000, "client.steps": 5, "client.batch_size": 16},
    "fedau_markov": {"run.rounds": 1000, "client.steps": 5, "client.batch_size": 16},
    "fedau_cyclic": {"run.rounds": 1000, "client.steps": 5, "client.batch_size": 16},
}
TRAIN_SET = 60_000             # Fashion-MNIST training images: one pass for global_train_loss@R (FedAU)
TEST_SET = 10_000


def family(protocol: str) -> str:
    return "fedau" if protocol.startswith("fedau") else "default"


# --- the workload -----------------------------------------------------------------------------------

def _flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def load_workload(claims_dir: Path) -> dict[str, dict[str, Any]]:
    """``{protocol: {"base": path, "set": {}, "methods": {method: {key: value}}, "seeds": n}}``: each method's
    default-tier values over its base file as ``fedhet claims run`` applies them (``same_as`` and
    ``methods_from`` resolved, the protocol's ``set`` folded in; :mod:`fedhet.lab.claims.definitions`)."""
    sys.path.insert(0, str(REPO / "src"))
    from fedhet.lab.claims.definitions import load_suite

    suite = load_suite(claims_dir)
    return {name: {"base": str(protocol.base), "set": {},
                   "methods": {method: protocol.overrides(method, tier="default") for method in protocol.methods},
                   "seeds": len(protocol.run_seeds(tier="default"))}
            for name, protocol in suite.protocols.items()}


def evaluation_plan(workload: dict[str, Any], protocol: str, method: str) -> dict[str, float]:
    """What one default-tier run evaluates, from its own configuration and the engine's rule
    (``fedhet.engine.run_handle``: every ``run.eval_every`` rounds, the last round, and the rounds of
    ``run.global_train_loss_every`` and ``run.client_eval_every``): the number of evaluations and the
    examples they pass through the model (the test set, the validation split of
    ``data.validation_fraction``, and the training set at each global-train-loss round)."""
    from fedhet.config.schema import load_config
    from fedhet.engine.client_eval import is_client_eval_round

    keys = {**workload["set"], **workload["methods"][method], **REGIME.get(protocol, {})}
    config = load_config(workload["base"], keys)
    run = config.run
    validation = float(getattr(config.data.options, "validation_fraction", 0.0) or 0.0)
    evaluations = train_passes = 0
    for r in range(1, run.rounds + 1):
        train_pass = is_client_eval_round(r, run.global_train_loss_every, run.rounds)
        if (r % run.eval_every == 0 or r == run.rounds or train_pass
                or is_client_eval_round(r, run.client_eval_every, run.rounds)):
            evaluations += 1
            train_passes += int(train_pass)
    examples = evaluations * (TEST_SET + validation * TRAIN_SET) + train_passes * (1 - validation) * TRAIN_SET
    return {"rounds": run.rounds, "evaluations": evaluations, "eval_examples": examples,
            "validation_fraction": validation}


def run_overrides(workload: dict[str, Any], protocol: str, method: str, rounds: int, run_name: str,
                  out_dir: str, backend: str = "sequential") -> dict[str, Any]:
    """The run's overrides: protocol set < method < the regime < the measurement's rounds and place."""
    keys = {**workload["set"], **workload["methods"][method], **REGIME.get(protocol, {})}
    keys.update({"run.rounds": rounds, "run.name": run_name, "run.out_dir": out_dir, "run.backend": backend,
                 "run.eval_every": 1, "run.progress": False})
    return keys


# --- the child: one measured run --------------------------------------------------------------------

def child(spec: dict[str, Any]) -> dict[str, Any]:
    """Run ``spec`` in this (fresh) process and return its CPU seconds by phase."""
    import torch  # noqa: F401  (imports are part of the start-up, as in a sweep worker)

    from fedhet.engine import callbacks as callbacks_module
    from fedhet.engine import run_handle, runner
    from fedhet.engine.callbacks import Callback
    from fedhet.engine.simulator import Simulator

    clock = time.process_time
    phases = {"train": 0.0, "server": 0.0, "eval": 0.0, "io": 0.0, "checkpoint": 0.0}
    counts = {"eval_calls": 0, "eval_examples": 0}

    def timed(phase, fn):
        def wrapper(*args, **kwargs):
            started = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                phases[phase] += clock() - started
        return wrapper

    original_init = Simulator.__init__

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        self.backend.train_cohort = timed("train", self.backend.train_cohort)
        self.server.step = timed("server", self.server.step)
    Simulator.__init__ = init
    original_evaluate = run_handle.evaluate

    def evaluate(task, *args, **kwargs):
        counts["eval_calls"] += 1
        counts["eval_examples"] += int(task.test.targets.numel())
        return original_evaluate(task, *args, **kwargs)
    run_handle.evaluate = timed("eval", evaluate)       # RunHandle.run_round evaluates there
    callbacks_module.MetricsWriter.on_round_end = timed("io", callbacks_module.MetricsWriter.on_round_end)
    # Timed apart: a short measurement checkpoints at its last round, the regime every checkpoint_every.
    callbacks_module.CheckpointCallback.on_round_end = timed("checkpoint",
                                                             callbacks_module.CheckpointCallback.on_round_end)

    rounds: list[dict[str, Any]] = []
    marks: dict[str, float] = {}

    class Recorder(Callback):
        def on_run_start(self, run):
            marks["start"] = clock()
            self.last = clock()
            self.before = dict(phases)

        def on_round_end(self, run, record):
            now = clock()
            rounds.append({"cpu": now - self.last, **{k: phases[k] - self.before[k] for k in phases},
                           "participants": record["num_participants"]})
            self.last, self.before = now, dict(phases)
            return False

        def on_run_end(self, run, summary):
            marks["end_callbacks"] = clock()

    # Local steps per round: read from the cohort the backend returns.
    steps_seen: list[int] = []
    original_run_round = Simulator._run_round

    def run_round(self):
        record, cohort = original_run_round(self)
        steps_seen.append(int(cohort.local_steps.sum()))
        return record, cohort
    Simulator._run_round = run_round

    from fedhet.config.schema import read_toml_file
    from fedhet.lab.sweep.plan import build_run_config

    raw = read_toml_file(spec["base"], key="config")
    config = build_run_config(raw, spec["overrides"])
    run_dir = Path(spec["out_dir"]) / spec["name"]
    try:
        from fedhet.engine.dataset_cache import DatasetCache
        extra = {"datasets": DatasetCache()}
    except ImportError:                      # --sources of a fedhet before the cache: imports are still reused
        extra = {}
    runner.run_experiment(config, run_dir, callbacks=[Recorder()], **extra)
    finished = clock()
    for row, steps in zip(rounds, steps_seen):
        row["steps"] = steps
    result = {"startup_cpu": marks["start"], "end_cpu": finished - rounds_end(marks, rounds),
              "rounds": list(rounds), "checkpoint_every": config.run.checkpoint_every,
              "checkpoint_cpu": rounds[-1]["checkpoint"],
              "eval_examples_per_call": counts["eval_examples"] / max(1, counts["eval_calls"]),
              # Every measured round evaluates (run.eval_every = 1): the test set and, where the
              # protocol carves one, the validation split; the per-round eval time covers both.
              "eval_examples_per_round": counts["eval_examples"] / max(1, len(rounds)),
              "batch_size": getattr(config.client.options, "batch_size", None), "model": config.model.name,
              "solver": config.client.name}
    # The next run of a serving sweep worker (fedhet.lab.sweep.worker --serve): another seed, in this
    # process, its start-up from the call to round 1 (imports done, the dataset cached when it can be).
    warm = build_run_config(raw, {**spec["overrides"], "run.seed": config.run.seed + 1, "run.rounds": 1})
    began = clock()
    runner.run_experiment(warm, run_dir.with_name(run_dir.name + "-warm"), callbacks=[Recorder()], **extra)
    result["warm_startup_cpu"] = marks["start"] - began
    return result


def rounds_end(marks: dict[str, float], rounds: list[dict[str, Any]]) -> float:
    """CPU time at the end of the last round (start-up plus every round)."""
    return marks["start"] + sum(r["cpu"] for r in rounds)


# --- the parent -------------------------------------------------------------------------------------

def measure(protocol: str, method: str, workload: dict[str, Any], rounds: int, scratch: str,
            sources: Path, backend: str) -> dict[str, Any]:
    name = f"{protocol}__{method}"
    spec = {"base": workload["base"], "name": name, "out_dir": scratch,
            "overrides": run_overrides(workload, protocol, method, rounds, name, scratch, backend)}
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(sources), env.get("PYTHONPATH", "")) if p)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True,
                          env=env, timeout=900)
    wall = time.perf_counter() - started
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{name} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    result = json.loads(lines[-1][len("RESULT "):])
    result["wall"] = wall
    return result


def per_round(result: dict[str, Any]) -> dict[str, float]:
    """Mean CPU seconds per round by phase, the first round left out when there are others."""
    rows = result["rounds"][1:] or result["rounds"]
    mean = {k: statistics.fmean(r[k] for r in rows) for k in ("cpu", "train", "server", "eval", "io", "checkpoint")}
    mean["other"] = mean["cpu"] - mean["train"] - mean["server"] - mean["eval"] - mean["io"] - mean["checkpoint"]
    # The round as the regime runs it: the measured rounds' checkpoint is one per checkpoint_every rounds.
    mean["checkpoint"] = result["checkpoint_cpu"] / result["checkpoint_every"]
    mean["cpu"] = sum(mean[k] for k in ("train", "server", "eval", "io", "checkpoint", "other"))
    mean["participants"] = statistics.fmean(r["participants"] for r in rows)
    mean["steps"] = statistics.fmean(r["steps"] for r in rows)
    return mean


def extrapolate(plan: dict[str, float], result: dict[str, Any]) -> dict[str, float]:
    """CPU seconds of one full run of the default tier (its :func:`evaluation_plan`), by phase."""
    mean = per_round(result)
    # The round's evaluation time over the examples that round evaluated (test + validation split). Until
    # 2026-11-25 this divided by the examples of one evaluate() call, which counted a protocol with a
    # validation split's evaluation twice (results/claims-cost-20261124-*.md overstate it so).
    eval_per_example = mean["eval"] / max(1.0, result["eval_examples_per_round"])
    rounds_total = plan["rounds"]
    return {"startup": result["startup_cpu"], "startup_warm": result["warm_startup_cpu"],
            "train": rounds_total * mean["train"],
            "server": rounds_total * mean["server"], "eval": plan["eval_examples"] * eval_per_example,
            "io": rounds_total * (mean["io"] + mean["checkpoint"]) + result["end_cpu"], "other": rounds_total * mean["other"]}


def roofline(result: dict[str, Any], peaks: dict[str, Any]) -> dict[str, float]:
    """Seconds of one round's local training at the one-thread roofline, from the measured mean steps."""
    from flop_count import gradient_flops, gradients_per_step, linear_layers
    from roofline import count_round

    from fedhet.config.schema import load_config
    from fedhet.core.registry import MODELS

    mean = per_round(result)
    batch = result["batch_size"] or 64
    # count_round counts clients * epochs * client_size examples: one "client" doing every step of the round.
    options = load_config(None, {"model.name": result["model"]}).model.options   # loads the registries too
    model = MODELS.get(result["model"]).factory(options, input_shape=(1, 28, 28), num_classes=10)
    work = count_round(model, clients=1, client_size=int(round(mean["steps"] * batch)), epochs=1, batch=batch,
                       test_images=0, eval_batch=1)
    work["flops"] = (mean["steps"] * gradient_flops(linear_layers(model), batch)
                     * gradients_per_step(result.get("solver", "sgd")))
    seconds = max(work["flops"] / peaks["flops_peak_1"], work["bytes"] / peaks["bandwidth_1"])
    bare = mean["cpu"] - mean["eval"]      # the whole round but its evaluation: server step, I/O, bookkeeping
    return {"flops": work["flops"], "bytes": work["bytes"], "roofline_s": seconds,
            "measured_s": mean["train"], "ratio": mean["train"] / seconds, "round_ratio": bare / seconds}


def one_thread_peaks() -> dict[str, float]:
    """This machine's one-thread float32 matmul peak (1024 squares; the 64x784x200 step shape too) and
    copy bandwidth (64 MiB), timed in CPU seconds (``benchmarks/roofline.py`` times wall seconds)."""
    import torch
    from claims_floor import best_cpu_seconds

    torch.set_num_threads(1)
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    x, w = torch.randn(64, 784), torch.randn(784, 200)
    src, dst = torch.ones(16 << 20), torch.empty(16 << 20)
    # CPU seconds: on a shared machine a one-thread kernel's CPU time is disturbed far less than its wall time.
    peaks = {"flops_peak_1": 2 * 1024 ** 3 / best_cpu_seconds(lambda: torch.mm(a, b), 20, trials=5),
             "mlp_shape_gflops_1": 2 * 64 * 784 * 200 / best_cpu_seconds(lambda: torch.mm(x, w), 500, trials=5) / 1e9,
             "bandwidth_1": 2 * src.numel() * 4 / best_cpu_seconds(lambda: dst.copy_(src), 20, trials=5)}
    print(f"claims_cost: 1-thread peaks: {peaks['flops_peak_1'] / 1e9:.0f} GFLOP/s (1024^3), "
          f"{peaks['mlp_shape_gflops_1']:.0f} GFLOP/s (64x784x200), {peaks['bandwidth_1'] / 1e9:.1f} GB/s copy", flush=True)
    return peaks


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--claims-dir", default=str(DEFAULT_CLAIMS_DIR))
    parser.add_argument("--protocols", default="", help="comma-separated protocols (default: all)")
    parser.add_argument("--methods", default="", help="comma-separated methods (default: all of each protocol)")
    parser.add_argument("--rounds", type=int, default=4, help="rounds measured per run (default 4)")
    parser.add_argument("--rounds-fedau", type=int, default=20,
                        help="rounds measured per FedAU run (default 20: its rounds are short and vary with "
                             "the participation pattern)")
    parser.add_argument("--backend", default="sequential", choices=("sequential", "vectorized"),
                        help="run.backend of the measured runs (default sequential, what each sweep job runs)")
    parser.add_argument("--seeds", type=int, default=0,
                        help="evaluation seeds per method (default: each protocol's own, 5 in the default tier)")
    parser.add_argument("--jobs", type=int, default=2, help="cores the tier's sweep uses (default 2)")
    parser.add_argument("--no-roofline", action="store_true", help="skip measuring the machine's peaks")
    parser.add_argument("--sources", default=str(REPO / "src"),
                        help="the fedhet source tree the runs use (another checkout's src: a before/after pair)")
    parser.add_argument("--out", default=str(HERE / "results"))
    parser.add_argument("--rescore", metavar="JSON",
                        help="re-extrapolate the evaluation of an earlier results file (rescore's docstring)")
    parser.add_argument("--measure", action="store_true",
                        help="measure the per-phase breakdown (runs a few rounds of every protocol and method) "
                             "instead of counting the tier's floor")
    parser.add_argument("--tier", default="default", choices=("quick", "default", "full"),
                        help="the claims tier whose floor is counted (default: default)")
    parser.add_argument("--runs", metavar="DIR",
                        help="a `fedhet claims run` output directory: each protocol's summed wall_seconds "
                             "against its floors")
    parser.add_argument("--tier-wall", type=float, metavar="S",
                        help="the tier's measured wall seconds, against its floors on --jobs cores")
    parser.add_argument("--quick", action="store_true",
                        help="draw one seed of each protocol's runs and count its work for every seed "
                             "(an estimate: seeds draw different partitions and participation)")
    args = parser.parse_args(argv)
    if args.rescore:
        return rescore(Path(args.rescore), Path(args.claims_dir))
    if args.child:
        print("RESULT " + json.dumps(child(json.loads(args.child))), flush=True)
        return 0
    if not args.measure:
        from claims_floor import floor

        sys.path.insert(0, str(REPO / "src"))
        floor(Path(args.claims_dir), tier=args.tier, runs_dir=Path(args.runs) if args.runs else None,
              tier_wall=args.tier_wall, jobs=args.jobs, quick=args.quick, out=Path(args.out),
              command=" ".join([Path(sys.executable).name, "benchmarks/claims_cost.py", *(argv or sys.argv[1:])]))
        return 0

    import torch
    workload = load_workload(Path(args.claims_dir))
    protocols = [p for p in workload if not args.protocols or p in args.protocols.split(",")]
    meta = {"machine": machine(f"torch {torch.__version__}"), "load_before": load_average(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join([Path(sys.executable).name, "benchmarks/claims_cost.py", *(argv or sys.argv[1:])]),
            "sources": args.sources, "backend": args.backend, "rounds_measured": args.rounds,
            "rounds_measured_fedau": args.rounds_fedau, "seeds": args.seeds, "jobs": args.jobs,
            "regime": REGIME}
    print(f"claims_cost: {meta['machine']}; load average {meta['load_before']}", flush=True)
    peaks = None
    if not args.no_roofline:
        sys.path.insert(0, str(REPO / "src"))
        peaks = one_thread_peaks()
    rows = []
    with tempfile.TemporaryDirectory(prefix="claims-cost-") as scratch:
        for protocol in protocols:
            methods = [m for m in workload[protocol]["methods"] if not args.methods or m in args.methods.split(",")]
            for method in methods:
                rounds = args.rounds_fedau if family(protocol) == "fedau" else args.rounds
                result = measure(protocol, method, workload[protocol], rounds, scratch, Path(args.sources), args.backend)
                plan = evaluation_plan(workload[protocol], protocol, method)
                run = extrapolate(plan, result)
                row = {"protocol": protocol, "method": method, "rounds": plan["rounds"], "per_round": per_round(result),
                       "evaluations": plan["evaluations"],
                       "run_cpu": run, "run_total": sum(v for k, v in run.items() if k != "startup_warm"),
                       "measured_wall": result["wall"],
                       "seeds": args.seeds or workload[protocol]["seeds"]}
                if peaks is not None:
                    row["roofline"] = roofline(result, peaks)
                rows.append(row)
                pr = row["per_round"]
                print(f"claims_cost: {protocol}/{method}: start-up {run['startup']:.2f} s (warm {run['startup_warm']:.2f}), round {pr['cpu']*1e3:.0f} ms "
                      f"(train {pr['train']*1e3:.0f}, server {pr['server']*1e3:.1f}, eval {pr['eval']*1e3:.0f}, "
                      f"io {pr['io']*1e3:.1f}, checkpoint {pr['checkpoint']*1e3:.1f}, other {pr['other']*1e3:.1f}), run {row['run_total']:.0f} CPU s"
                      + (f", train/roofline {row['roofline']['ratio']:.2f}x, round/roofline "
                         f"{row['roofline']['round_ratio']:.2f}x" if peaks else ""), flush=True)
    meta["load_after"] = load_average()
    write_results(meta, rows, peaks, Path(args.out) / f"claims-cost-{datetime.datetime.now():%Y%m%d-%H%M%S}")
    return 0


def write_results(meta: dict[str, Any], rows: list[dict[str, Any]], peaks: dict[str, Any] | None, stem: Path) -> None:
    """The tier's totals into ``meta``, then ``<stem>.json`` and ``<stem>.md``; prints the table."""
    totals = {phase: sum(r["run_cpu"][phase] * r["seeds"] for r in rows)
              for phase in ("startup", "startup_warm", "train", "server", "eval", "io", "other")}
    meta["tier_cpu"] = totals
    # One process per run (the sweep before issue 22) pays the cold start-up; a serving worker the warm one.
    meta["tier_cpu_total"] = sum(v for k, v in totals.items() if k != "startup_warm")
    meta["tier_cpu_total_serving"] = meta["tier_cpu_total"] - totals["startup"] + totals["startup_warm"]
    meta["tier_wall_estimate"] = meta["tier_cpu_total"] / meta["jobs"]
    meta["tier_wall_estimate_serving"] = meta["tier_cpu_total_serving"] / meta["jobs"]
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps({"meta": meta, "peaks": peaks, "rows": rows}, indent=1))
    text = markdown(meta, rows, peaks)
    stem.with_suffix(".md").write_text(text)
    print(text)


def rescore(path: Path, claims_dir: Path) -> int:
    """Re-extrapolate the evaluation of a results file written before 2026-11-25 (``--rescore``): its
    per-round evaluation time covers the test set plus the validation split, and is spread over the
    examples of the run's own :func:`evaluation_plan`. Nothing is measured again; the other phases are
    kept. Writes ``<file>-rescored.json/.md``."""
    payload = json.loads(path.read_text())
    workload = load_workload(claims_dir)
    for row in payload["rows"]:
        plan = evaluation_plan(workload[row["protocol"]], row["protocol"], row["method"])
        per_round_examples = TEST_SET + plan["validation_fraction"] * TRAIN_SET
        row["evaluations"] = plan["evaluations"]
        row["run_cpu"]["eval"] = row["per_round"]["eval"] / per_round_examples * plan["eval_examples"]
        row["run_total"] = sum(v for k, v in row["run_cpu"].items() if k != "startup_warm")
    meta = payload["meta"]
    meta["rescored"] = f"{path.name}, evaluation re-extrapolated on {datetime.date.today()} (claims_cost.py --rescore)"
    write_results(meta, payload["rows"], payload["peaks"], path.with_name(path.stem + "-rescored"))
    return 0


def markdown(meta: dict[str, Any], rows: list[dict[str, Any]], peaks: dict[str, Any] | None) -> str:
    lines = [f"# Claims cost breakdown ({meta['date']})", "", f"Machine: {meta['machine']}",
             *([f"Rescored: {meta['rescored']}"] if meta.get("rescored") else []),
             f"Load average before / after: {meta['load_before']} / {meta['load_after']} (a shared machine: "
             "CPU seconds are disturbed less than wall seconds, but not immune)", f"Command: `{meta['command']}`", "",
             f"Per run ({meta['rounds_measured']} rounds measured, FedAU {meta['rounds_measured_fedau']}, the first left out, "
             f"run.backend = {meta['backend']}; extrapolated to the regime's "
             "T and evaluations), CPU seconds:", "",
             "| protocol/method | T | evaluations | round ms (no eval) | one eval ms | train | server | eval | io+other | "
             "start-up | start-up (serving worker) | run CPU s | server % of round | train / roofline | round / roofline |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        pr, run = r["per_round"], r["run_cpu"]
        ratio = f"{r['roofline']['ratio']:.2f}x" if "roofline" in r else "-"
        round_ratio = f"{r['roofline']['round_ratio']:.2f}x" if "roofline" in r else "-"
        bare = pr["cpu"] - pr["eval"]
        lines.append(f"| {r['protocol']}/{r['method']} | {r['rounds']} | {r['evaluations']} | {bare*1e3:.0f} | {pr['eval']*1e3:.0f} | "
                     f"{run['train']:.0f} | {run['server']:.1f} | {run['eval']:.1f} | {run['io'] + run['other']:.1f} | "
                     f"{run['startup']:.2f} | {run['startup_warm']:.2f} | {r['run_total']:.0f} | {100 * pr['server'] / max(bare, 1e-9):.1f} | {ratio} | {round_ratio} |")
    t = meta["tier_cpu"]
    seeds = sorted({r["seeds"] for r in rows})
    lines += ["", f"Tier ({'/'.join(map(str, seeds))} seeds per method, {sum(r['seeds'] for r in rows)} runs): {meta['tier_cpu_total']:.0f} CPU s = "
              + ", ".join(f"{k} {v:.0f}" for k, v in t.items())
              + f"; on {meta['jobs']} cores (perfect packing) {meta['tier_wall_estimate'] / 60:.1f} min with one process "
              f"per run, {meta['tier_cpu_total_serving']:.0f} CPU s = {meta['tier_wall_estimate_serving'] / 60:.1f} min "
              "with serving workers (the warm start-up)."]
    if peaks:
        lines.append(f"Roofline peaks (1 thread): {peaks['flops_peak_1'] / 1e9:.0f} GFLOP/s float32 matmul, "
                     f"{peaks['bandwidth_1'] / 1e9:.1f} GB/s.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
