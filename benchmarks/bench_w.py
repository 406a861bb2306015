"""Workload W: the compute floor, fedhet's backends, Flower and FedLab, in one session.

Every implementation runs as its own subprocess (fedhet and the floor in the project's .venv, the
peers in benchmarks/.venv-peers), in alternating order: repeat r runs the list rotated by r, so
that slow drifts of the machine spread over all of them. For each (model, implementation) the
table gives the median over repeats of the wall seconds of the training-and-evaluation loop (as
each implementation defines it in its own file), seconds per round, the ratio to the floor's
median, the final test accuracy, the CPU seconds of the whole process tree (from wait4: the
process and its waited-for children, including start-up and data loading) and the peak memory of
the process tree: the sum of RSS (sampled every 0.1 s; counts pages shared between processes, e.g.
the dataset of forked workers, once per process) and the sum of PSS (shares them out; the honest
total; sampled every 3 s because reading it is expensive, see TreeSampler).

Usage (from the repository root):

    .venv/bin/python benchmarks/bench_w.py [--models mlp,cnn] [--repeats 3] [--rounds 30]
        [--impls floor,fedhet-sequential,fedhet-processes,fedhet-vectorized,fedhet-auto,flower,fedlab]
        [--no-peers] [--timeout 3600] [--out benchmarks/results] [--device cpu|cuda]

``--device cuda`` runs the floor and fedhet's single-process backends on the first GPU (the GPU
target compares ``fedhet-vectorized`` with ``fedhet-sequential``); Flower, FedLab and the CPU-only
``processes`` backend are left out there, and the table names the GPU.

Writes ``w-<timestamp>.json`` (every run, the machine, the command line) and ``w-<timestamp>.md``.
If the peers' environment cannot be built (benchmarks/setup_peers.sh), the peers are skipped and
the table says why.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from machine import machine  # noqa: E402
ROOT = HERE.parent
FEDHET_PYTHON = ROOT / ".venv" / "bin" / "python"
PEERS_PYTHON = HERE / ".venv-peers" / "bin" / "python"
ALL_IMPLS = ["floor", "fedhet-sequential", "fedhet-processes", "fedhet-ray", "fedhet-vectorized", "fedhet-auto",
             "flower", "fedlab"]
PEERS = {"flower", "fedlab"}
CPU_ONLY = PEERS | {"fedhet-processes", "fedhet-ray"}


def command_for(impl: str, model: str, rounds: int, device: str = "cpu") -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if impl == "floor":
        return [str(FEDHET_PYTHON), "impl_floor.py", model, str(rounds), device], env
    if impl.startswith("fedhet-"):
        # OMP/MKL thread variables are left to fedhet: it sets its own thread counts.
        env.pop("OMP_NUM_THREADS"), env.pop("MKL_NUM_THREADS")
        return [str(FEDHET_PYTHON), "impl_fedhet.py", model, impl.split("-", 1)[1], str(rounds), device], env
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(HERE / "peers" / "torchvision_standin")])
    return [str(PEERS_PYTHON), f"impl_{impl}.py", model, str(rounds)], env


# --- process-tree sampling --------------------------------------------------------------------------

def children_map() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            tree.setdefault(int(fields[1]), []).append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    return tree


def descendants(pid: int) -> list[int]:
    tree, found, stack = children_map(), [], [pid]
    while stack:
        current = stack.pop()
        found.append(current)
        stack.extend(tree.get(current, []))
    return found


PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


def rss_kib(pid: int) -> int:
    """Resident set of one process in KiB (from ``statm``: cheap, no page-table walk); 0 if gone."""
    try:
        with open(f"/proc/{pid}/statm") as handle:
            return int(handle.read().split()[1]) * PAGE_KIB
    except (OSError, IndexError, ValueError):
        return 0


def pss_kib(pid: int) -> int:
    """Proportional set of one process in KiB; 0 if gone. ``smaps_rollup`` walks the page tables:
    about 20 ms per fedhet process holding the dataset, so it is read rarely (see TreeSampler)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, IndexError, ValueError):
        pass
    return 0


class TreeSampler(threading.Thread):
    """Peak memory of a process tree, observed without loading the machine it measures.

    RSS (``statm``) every ``interval`` s; the tree's members are re-listed every ``tree_interval``
    s (a scan of /proc); PSS (``smaps_rollup``) every ``pss_interval`` s. Reading PSS of a 3-process
    fedhet tree every 0.1 s took ~60 ms per sample, i.e. ~60% of one of this machine's 2 cores,
    which slowed the multi-process runs it measured; at these rates the sampler costs about 2% of
    one core. The PSS peak is therefore a sample of the plateau, not an exact maximum.
    """

    def __init__(self, pid: int, interval: float = 0.1, tree_interval: float = 1.0, pss_interval: float = 3.0):
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.tree_every = max(1, round(tree_interval / interval))
        self.pss_every = max(1, round(pss_interval / interval))
        self.peak_rss = self.peak_pss = 0
        self.done = threading.Event()

    def run(self) -> None:
        tick, members = 0, [self.pid]
        while not self.done.is_set():
            if tick % self.tree_every == 0:
                members = descendants(self.pid)
            self.peak_rss = max(self.peak_rss, sum(rss_kib(p) for p in members))
            # First PSS sample after one tree interval, once start-up has loaded the data.
            if tick % self.pss_every == self.tree_every % self.pss_every:
                self.peak_pss = max(self.peak_pss, sum(pss_kib(p) for p in members))
            tick += 1
            self.done.wait(self.interval)


def run_one(impl: str, model: str, rounds: int, timeout: float, device: str = "cpu") -> dict:
    command, env = command_for(impl, model, rounds, device)
    with tempfile.TemporaryFile("w+") as output:
        started = time.perf_counter()
        process = subprocess.Popen(command, cwd=HERE, env=env, stdout=output, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        sampler = TreeSampler(process.pid)
        sampler.start()
        deadline = started + timeout
        status = usage = None
        while status is None:
            pid, status_code, rusage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                status, usage = status_code, rusage
                break
            if time.perf_counter() > deadline:
                os.killpg(process.pid, 9)
                _, status, usage = os.wait4(process.pid, 0)
                break
            time.sleep(0.05)
        process.returncode = os.waitstatus_to_exitcode(status)
        process_wall = time.perf_counter() - started
        sampler.done.set()
        sampler.join()
        try:
            os.killpg(process.pid, 9)          # leftovers (e.g. Ray's processes) of this run only
        except ProcessLookupError:
            pass
        output.seek(0)
        text = output.read()
    record = {"impl": impl, "model": model, "rounds_requested": rounds, "command": shlex.join(command),
              "returncode": process.returncode, "process_wall_seconds": process_wall,
              "cpu_seconds": usage.ru_utime + usage.ru_stime if usage else None,
              "peak_rss_mib": sampler.peak_rss / 1024, "peak_pss_mib": sampler.peak_pss / 1024}
    lines = [line for line in text.splitlines() if line.startswith("RESULT ")]
    if process.returncode == 0 and lines:
        record.update(json.loads(lines[-1][len("RESULT "):]))
    else:
        record["error"] = "\n".join(text.splitlines()[-15:]) or f"exit code {process.returncode}"
    return record


# --- the peers' environment ---------------------------------------------------------------------------

def prepare_peers() -> str | None:
    """None when the peers can run, else the reason they cannot."""
    result = subprocess.run(["bash", str(HERE / "setup_peers.sh")], capture_output=True, text=True)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        return "benchmarks/setup_peers.sh failed: " + " | ".join(tail)
    return None


# --- summary ------------------------------------------------------------------------------------------

def summarize(runs: list[dict], models: list[str], impls: list[str]) -> list[dict]:
    rows = []
    for model in models:
        floor_runs = [r["wall_seconds"] for r in runs if r["model"] == model and r["impl"] == "floor" and "wall_seconds" in r]
        floor = statistics.median(floor_runs) if floor_runs else None
        for impl in impls:
            mine = [r for r in runs if r["model"] == model and r["impl"] == impl]
            good = [r for r in mine if "wall_seconds" in r]
            if not good:
                rows.append({"model": model, "impl": impl, "error": (mine[-1].get("error", "not run") if mine else "not run")})
                continue
            wall = statistics.median(r["wall_seconds"] for r in good)
            rounds = good[0]["rounds"]
            rows.append({
                "model": model, "impl": impl, "repeats": len(good), "wall_seconds": wall,
                "wall_all": [round(r["wall_seconds"], 3) for r in good],
                "seconds_per_round": wall / max(rounds, 1), "ratio_to_floor": wall / floor if floor else None,
                "final_accuracy": statistics.median(r["final_accuracy"] for r in good),
                "cpu_seconds": statistics.median(r["cpu_seconds"] for r in good),
                "peak_rss_mib": max(r["peak_rss_mib"] for r in good), "peak_pss_mib": max(r["peak_pss_mib"] for r in good),
                "backend": good[0].get("backend"), "notes": good[0].get("notes"),
                # fedhet's own split (impl_fedhet.py): round 1 starts the workers; setup is before the stopwatch.
                **{key: statistics.median(r[key] for r in good) for key in
                   ("first_round_seconds", "later_round_seconds", "setup_seconds") if all(key in r for r in good)}})
    return rows


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [f"# Workload W, {meta['date']}", "", f"Machine: {meta['machine']}; load average at start "
             f"{meta['load_start']}, at end {meta['load_end']}.", "", f"Command: `{meta['command']}`", "",
             "| model | implementation | wall s (median) | s/round | ratio to floor | final acc. | CPU s (tree) "
             "| peak RSS MiB | peak PSS MiB | runs (wall s) | round 1 s | later rounds s/round | setup s |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |"]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['model']} | {row['impl']} | failed: {row['error'].splitlines()[-1][:120] if row['error'] else ''} "
                         "| | | | | | | | | | |")
            continue
        ratio = f"{row['ratio_to_floor']:.2f}" if row["ratio_to_floor"] is not None else "-"
        lines.append(f"| {row['model']} | {row['impl']} | {row['wall_seconds']:.2f} | {row['seconds_per_round']:.3f} "
                     f"| {ratio} | {row['final_accuracy']:.4f} | {row['cpu_seconds']:.1f} | {row['peak_rss_mib']:.0f} "
                     f"| {row['peak_pss_mib']:.0f} | {', '.join(f'{w:.2f}' for w in row['wall_all'])} "
                     f"| {_seconds(row, 'first_round_seconds', 2)} | {_seconds(row, 'later_round_seconds', 3)} "
                     f"| {_seconds(row, 'setup_seconds', 2)} |")
    for note in meta.get("notes", []):
        lines += ["", f"Note: {note}"]
    return "\n".join(lines) + "\n"


def _seconds(row: dict, key: str, digits: int) -> str:
    return f"{row[key]:.{digits}f}" if key in row else "-"


def gpu_name() -> str:
    """The first GPU's name from nvidia-smi (the benchmark's own process does not import torch)."""
    try:
        result = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30)
        return result.stdout.strip().splitlines()[0] if result.returncode == 0 and result.stdout.strip() else "unknown GPU"
    except (OSError, subprocess.SubprocessError):
        return "unknown GPU"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="mlp,cnn")
    parser.add_argument("--impls", default=",".join(ALL_IMPLS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per run before it is killed")
    parser.add_argument("--no-peers", action="store_true", help="skip Flower and FedLab")
    parser.add_argument("--out", default=str(HERE / "results"))
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                        help="where the floor and fedhet compute (cuda: the first GPU; CPU-only implementations are left out)")
    args = parser.parse_args(argv)
    command = shlex.join([sys.executable, *([sys.argv[0]] + (argv if argv is not None else sys.argv[1:]))])
    print(f"bench_w: {command}", flush=True)
    models = [m for m in args.models.split(",") if m]
    impls = [i for i in args.impls.split(",") if i]
    unknown = sorted(set(impls) - set(ALL_IMPLS))
    if unknown:
        parser.error(f"unknown implementations {unknown}; allowed: {', '.join(ALL_IMPLS)}")
    notes = []
    if args.device == "cuda":
        left_out = [i for i in impls if i in CPU_ONLY]
        impls = [i for i in impls if i not in CPU_ONLY]
        if left_out:
            notes.append(f"--device cuda: {', '.join(left_out)} left out (CPU-only here).")
            print(f"bench_w: {notes[-1]}", flush=True)
    if args.no_peers:
        impls = [i for i in impls if i not in PEERS]
    elif PEERS & set(impls):
        reason = prepare_peers()
        if reason:
            notes.append(f"Flower and FedLab skipped: {reason}")
            print(f"bench_w: {notes[-1]}", flush=True)
            impls = [i for i in impls if i not in PEERS]
    if any(i in PEERS for i in impls):
        notes.append("FedLab 1.3.0 is installed with --no-deps plus pandas, scikit-learn, tqdm, munch, pynvml and "
                     "pillow, and runs with a stand-in torchvision module (benchmarks/peers/torchvision_standin).")
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
            "machine": machine() + (f"; device {gpu_name()}" if args.device == "cuda" else "; device CPU"),
            "load_start": " ".join(f"{v:.2f}" for v in os.getloadavg()), "command": command, "notes": notes,
            "repeats": args.repeats, "rounds": args.rounds}
    runs = []
    for repeat in range(args.repeats):
        for model in models:
            order = impls[repeat % len(impls):] + impls[:repeat % len(impls)]
            for impl in order:
                record = run_one(impl, model, args.rounds, args.timeout, args.device)
                record["repeat"] = repeat
                runs.append(record)
                shown = f"{record['wall_seconds']:.2f} s" if "wall_seconds" in record else "FAILED: " + record["error"].splitlines()[-1][:200]
                print(f"bench_w: repeat {repeat + 1}/{args.repeats} {model:4s} {impl:18s} {shown}", flush=True)
    meta["load_end"] = " ".join(f"{v:.2f}" for v in os.getloadavg())
    rows = summarize(runs, models, impls)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    table = markdown(rows, meta)
    for path, text in ((out / f"w-{stamp}.json", json.dumps({"meta": meta, "summary": rows, "runs": runs}, indent=1)),
                       (out / f"w-{stamp}.md", table)):
        temporary = path.with_suffix(path.suffix + ".tmp")
        temporary.write_text(text)
        os.replace(temporary, path)
    print(table)
    print(f"bench_w: wrote {out / f'w-{stamp}.md'} and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
