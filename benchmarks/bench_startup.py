"""Start-up of workload W: seconds from launching the process to the start of its first round.

Each implementation (``impl_floor.py``, ``impl_fedhet.py``) runs as its own subprocess, in
alternating order (repeat r rotates the list by r), for a few rounds; this script sets
``FEDHET_BENCH_LAUNCH`` to its ``time.time()`` just before each launch and the implementation reports
``startup_seconds`` just before round 1 (``workload.startup_seconds``): the interpreter, imports,
data, partition, model and, for fedhet, the configuration and the run directory's files. The floor
also runs a one-step ``torch.optim.SGD`` warm-up before its clock (torch's lazy compiler import,
which fedhet never triggers: it builds no torch optimiser); the table gives the floor with and
without it, and fedhet's excess over the floor without it (the strict comparison of issue 17).
Medians over repeats; the machine is shared, so the spread is printed too. Each implementation is
first launched once untimed (page cache, bytecode caches; ``PYTHONDONTWRITEBYTECODE`` is removed from
the children's environment, see ``run_one``).

Usage (from the repository root):

    .venv/bin/python benchmarks/bench_startup.py [--models mlp] [--repeats 7] [--rounds 2]
        [--impls floor,fedhet-sequential,fedhet-sequential@before] [--sources before=/path/to/old/src]
        [--out benchmarks/results]

Writes ``startup-<timestamp>.json`` (every run) and ``startup-<timestamp>.md``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_w import command_for  # noqa: E402
from machine import machine  # noqa: E402


def run_one(impl: str, model: str, rounds: int, timeout: float, sources: dict[str, str]) -> dict:
    """One launch. ``impl`` may name a fedhet source tree: ``fedhet-sequential@before`` runs
    ``impl_fedhet.py`` with ``PYTHONPATH`` = ``sources["before"]`` (to compare two versions in one
    alternating session)."""
    base, _, variant = impl.partition("@")
    command, env = command_for(base, model, rounds)
    if variant:
        env["PYTHONPATH"] = sources[variant]
    # As after `pip install`, which compiles every module: a Python told not to write bytecode
    # (PYTHONDONTWRITEBYTECODE, set in some sandboxes) compiles fedhet's ~100 modules at every
    # start (about 0.1 CPU s here), which is not fedhet's start-up.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["FEDHET_BENCH_LAUNCH"] = repr(time.time())
    launched = time.perf_counter()
    result = subprocess.run(command, cwd=HERE, env=env, capture_output=True, text=True, timeout=timeout)
    record = {"impl": impl, "model": model, "process_wall_seconds": time.perf_counter() - launched,
              "returncode": result.returncode}
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    if result.returncode == 0 and lines:
        record.update(json.loads(lines[-1][len("RESULT "):]))
    else:
        record["error"] = "\n".join((result.stdout + result.stderr).splitlines()[-15:])
    return record


def _bare(run: dict, kind: str) -> float:
    """Start-up without the floor's torch.optim warm-up (fedhet has none); kind: "" (wall) or "cpu_"."""
    return run[f"startup_{kind}seconds"] - run.get(f"warm_up_{kind}seconds", 0.0)


def summarize(runs: list[dict], model: str, impls: list[str]) -> list[dict]:
    good = [r for r in runs if r["model"] == model and r.get("startup_seconds") is not None]
    floor = {kind: statistics.median(_bare(r, kind) for r in good if r["impl"] == "floor")
             if any(r["impl"] == "floor" for r in good) else None for kind in ("", "cpu_")}
    rows = []
    for impl in impls:
        mine = [r for r in good if r["impl"] == impl]
        if not mine:
            rows.append({"model": model, "impl": impl, "startup_seconds": None})
            continue
        row = {"model": model, "impl": impl, "repeats": len(mine)}
        for kind in ("", "cpu_"):
            row[f"startup_{kind}seconds"] = statistics.median(r[f"startup_{kind}seconds"] for r in mine)
            row[f"bare_{kind}seconds"] = statistics.median(_bare(r, kind) for r in mine)
            row[f"excess_{kind}seconds"] = row[f"bare_{kind}seconds"] - floor[kind] if floor[kind] is not None else None
            row[f"startup_{kind}all"] = [round(r[f"startup_{kind}seconds"], 3) for r in mine]
        row["process_wall_seconds"] = statistics.median(r["process_wall_seconds"] for r in mine)
        rows.append(row)
    return rows


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [f"# Start-up of workload W, {meta['date']}", "", f"Machine: {meta['machine']}; load average at "
             f"start {meta['load_start']}, at end {meta['load_end']}.", "", f"Command: `{meta['command']}`", "",
             "Start-up: launch to the start of round 1, wall and CPU seconds (medians over repeats); "
             "\"bare\": without the floor's torch.optim warm-up, which fedhet does not need; \"excess\": "
             "bare minus the floor's bare.", "",
             "| model | implementation | start-up wall s | bare wall s | excess wall s | start-up CPU s | bare CPU s "
             "| excess CPU s | process wall s | runs (start-up wall s) |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    def number(value, sign=False):
        return "-" if value is None else (f"{value:+.2f}" if sign else f"{value:.2f}")
    for row in rows:
        if row["startup_seconds"] is None:
            lines.append(f"| {row['model']} | {row['impl']} | failed | | | | | | | |")
            continue
        lines.append(f"| {row['model']} | {row['impl']} | {number(row['startup_seconds'])} | {number(row['bare_seconds'])} "
                     f"| {number(row['excess_seconds'], True)} | {number(row['startup_cpu_seconds'])} "
                     f"| {number(row['bare_cpu_seconds'])} | {number(row['excess_cpu_seconds'], True)} "
                     f"| {number(row['process_wall_seconds'])} | {', '.join(f'{v:.2f}' for v in row['startup_all'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="mlp")
    parser.add_argument("--impls", default="floor,fedhet-sequential")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--out", default=str(HERE / "results"))
    parser.add_argument("--sources", default="", help="NAME=DIR,...: fedhet source trees; an implementation "
                        "IMPL@NAME runs with PYTHONPATH=DIR")
    args = parser.parse_args(argv)
    models, impls = args.models.split(","), args.impls.split(",")
    sources = dict(item.split("=", 1) for item in args.sources.split(",") if item)
    command = "benchmarks/bench_startup.py " + " ".join(argv if argv is not None else sys.argv[1:])
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine(), "load_start": " ".join(f"{v:.2f}" for v in os.getloadavg()), "command": command}
    runs = []
    for model in models:
        for impl in impls:
            # Untimed: fills the page cache and the bytecode caches.
            run_one(impl, model, 1, args.timeout, sources)
    for repeat in range(args.repeats):
        order = impls[repeat % len(impls):] + impls[:repeat % len(impls)]
        for model in models:
            for impl in order:
                record = run_one(impl, model, args.rounds, args.timeout, sources)
                record["repeat"] = repeat
                runs.append(record)
                print(f"repeat {repeat} {model} {impl}: start-up {record.get('startup_seconds', float('nan')):.3f} s, "
                      f"{record.get('startup_cpu_seconds', float('nan')):.3f} CPU s"
                      + (f" ({record['error'].splitlines()[-1]})" if "error" in record else ""), flush=True)
    meta["load_end"] = " ".join(f"{v:.2f}" for v in os.getloadavg())
    rows = [row for model in models for row in summarize(runs, model, impls)]
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(rows, meta)
    for name, content in ((f"startup-{stamp}.json", json.dumps({"meta": meta, "rows": rows, "runs": runs}, indent=1)),
                          (f"startup-{stamp}.md", text)):
        temporary = out / (name + ".tmp")
        temporary.write_text(content)
        os.replace(temporary, out / name)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
