"""The claims tier's wall time with a chosen ``run.backend`` (on a GPU: ``auto``, the vectorised cohort).

The claims' base files pin ``run.backend = "sequential"`` (each sweep job is one CPU core). This script
runs ``fedhet claims run --backend BACKEND --jobs J --no-report`` in a fresh output folder, and stops the
sweep after ``--max-seconds``
when it has not finished by then. It then reads every run's ``metrics.jsonl`` (its cumulative
``wall_seconds`` per round) and reports, protocol by protocol: runs finished and started, the wall
seconds of a finished run, seconds a round, and the tier's projected wall time when the cap stopped
it (each protocol's runs at the measured seconds a round of that protocol, spread over the J jobs:
``sum(rounds x s/round) / J``; an estimate, marked as one). With ``--report`` and a finished tier it
also runs ``fedhet claims report`` and keeps its verdict lines, to set beside the CPU verdicts.

Usage (from the repository root; Fashion-MNIST where fedhet finds it):

    PYTHONPATH=src python benchmarks/claims_gpu.py [--jobs 12] [--max-seconds 330] [--backend auto]
        [--groups 'CLAIM,CLAIM:JOBS;CLAIM:JOBS'] [--runs-dir /tmp/claims-gpu] [--report] [--out benchmarks/results]
        [--lockstep off|on|auto]

``--groups`` runs several sweeps at once over disjoint protocols (each its own output folder, moved into
one afterwards), so that a time cap measures every protocol instead of only the first ones in the
protocols file's order.

Writes ``claims-gpu-<timestamp>.json`` and ``.md``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from machine import machine  # noqa: E402
from result_files import write_results  # noqa: E402


def read_run(run_dir: Path) -> dict:
    """Rounds done, their cumulative wall seconds, and whether the run finished."""
    rounds, wall = 0, 0.0
    metrics = run_dir / "metrics.jsonl"
    if metrics.is_file():
        for line in metrics.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            rounds, wall = record.get("round", rounds), record.get("wall_seconds", wall)
    return {"rounds": rounds, "wall_seconds": wall, "finished": (run_dir / "summary.json").is_file()}


def planned_runs(claims_dir: Path, runs_dir: Path) -> list[tuple[str, Path, int, str]]:
    """``(protocol, run directory, planned rounds, what sets a round's work)`` of every run of the default
    tier; the last is the sweep ETA's (fedhet.lab.sweep.execute.eta_kind)."""
    from fedhet.lab.commands.claims import _plan  # noqa: PLC0415  (fedhet imported only here)
    from fedhet.lab.claims.planning import protocol_of  # noqa: PLC0415
    from fedhet.lab.sweep.execute import eta_kind  # noqa: PLC0415
    _suite, _claims, plan = _plan(str(claims_dir), None, "default", str(runs_dir))
    return [(protocol_of(run), run.run_dir, run.config.run.rounds, eta_kind(run)[0]) for run in plan.runs]


def parse_groups(text: str, jobs: int) -> list[tuple[str, int]]:
    """``[(claims for --only, jobs), ...]`` from ``'a,b:6;c:4'``; one sweep of every claim when empty."""
    if not text:
        return [("", jobs)]
    groups = []
    for part in text.split(";"):
        only, _, count = part.rpartition(":")
        groups.append((only, int(count)))
    return groups


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=12, help="jobs of the one sweep when --groups is not given")
    parser.add_argument("--groups", default="", help="sweeps to run at once, 'CLAIM,CLAIM:JOBS;CLAIM:JOBS' "
                                                     "(disjoint protocols, each its own output folder)")
    parser.add_argument("--max-seconds", type=float, default=330.0)
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--lockstep", default="off", choices=("off", "on", "auto"),
                        help="`fedhet claims run --lockstep` (default off: each run alone, the path measured "
                             "before lockstep existed; the command's own default is auto)")
    parser.add_argument("--runs-dir", type=Path, default=Path("/tmp/claims-gpu"))
    parser.add_argument("--report", action="store_true", help="run `fedhet claims report` when the tier finished")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args(argv)

    import torch  # noqa: PLC0415
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA GPU"
    line = machine(f"torch {torch.__version__}", gpu)
    if args.runs_dir.exists():
        shutil.rmtree(args.runs_dir)
    args.runs_dir.mkdir(parents=True)
    claims_dir = REPO / "configs" / "claims"
    out_dir = args.runs_dir / "runs"
    runs = planned_runs(claims_dir, out_dir)

    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), env.get("PYTHONPATH", "")) if p)
    groups = parse_groups(args.groups, args.jobs)
    sweeps = []
    started = time.perf_counter()
    for index, (only, jobs) in enumerate(groups):
        group_out = out_dir if len(groups) == 1 else args.runs_dir / f"group{index}"
        command = [sys.executable, "-m", "fedhet.cli", "claims", "run", "--claims", str(claims_dir), "--out",
                   str(group_out), "--jobs", str(jobs), "--backend", args.backend, "--lockstep", args.lockstep,
                   "--no-report"] + (["--only", only] if only else [])
        log = open(args.runs_dir / f"sweep{index}.log", "w")
        sweeps.append((subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                        start_new_session=True), log, group_out))
    deadline = started + args.max_seconds
    codes = []
    for sweep, log, _ in sweeps:
        try:
            codes.append(sweep.wait(timeout=max(deadline - time.perf_counter(), 0.1)))
        except subprocess.TimeoutExpired:
            codes.append(None)
    wall = time.perf_counter() - started
    for (sweep, log, _), code in zip(sweeps, codes):
        if code is None:
            os.killpg(sweep.pid, signal.SIGTERM)
            try:
                sweep.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(sweep.pid, signal.SIGKILL)
                sweep.wait()
        log.close()
    if len(groups) > 1:        # one folder of protocols for the report, as one sweep would have written
        out_dir.mkdir(parents=True, exist_ok=True)
        for _, _, group_out in sweeps:
            for protocol in group_out.iterdir():
                if protocol.is_dir():
                    protocol.rename(out_dir / protocol.name)

    protocols: dict[str, dict] = {}
    for protocol, run_dir, planned, workload in runs:
        row = protocols.setdefault(protocol, {"runs": 0, "finished": 0, "started": 0, "planned_rounds": 0,
                                              "rounds_done": 0, "run_wall": 0.0, "finished_walls": [],
                                              "workload": workload})
        state = read_run(run_dir)
        row["runs"] += 1
        row["planned_rounds"] += planned
        row["rounds_done"] += state["rounds"]
        row["run_wall"] += state["wall_seconds"]
        row["started"] += state["rounds"] > 0
        if state["finished"]:
            row["finished"] += 1
            row["finished_walls"].append(state["wall_seconds"])
    projected_busy = 0.0
    for row in protocols.values():
        row["seconds_per_round"] = row["run_wall"] / row["rounds_done"] if row["rounds_done"] else None
    for row in protocols.values():
        # A protocol the cap never reached borrows the rate of one with the same local work (marked).
        rate, row["rate_from"] = row["seconds_per_round"], None
        if rate is None:
            twins = [(name, other) for name, other in protocols.items()
                     if other["workload"] == row["workload"] and other["seconds_per_round"] is not None]
            if twins:
                row["rate_from"], rate = twins[0][0], twins[0][1]["seconds_per_round"]
        row["projection_rate"] = rate
        if rate is not None:
            projected_busy += rate * row["planned_rounds"]
    finished = sum(row["finished"] for row in protocols.values())
    complete = finished == len(runs)
    measured = all(row["projection_rate"] is not None for row in protocols.values())
    total_jobs = sum(jobs for _, jobs in groups)
    projection = wall if complete else (projected_busy / total_jobs if measured else None)

    verdicts: list[str] = []
    if args.report and complete:
        report = subprocess.run([sys.executable, "-m", "fedhet.cli", "claims", "report", "--claims", str(claims_dir),
                                 "--out", str(out_dir)], capture_output=True, text=True, env=env, timeout=300)
        verdicts = [v for v in report.stdout.splitlines() if re.search(r"holds|contradicted|not reproduced|"
                                                                       r"inconclusive|below regime", v)]
        (args.runs_dir / "report.txt").write_text(report.stdout + report.stderr)

    record = {"machine": line, "command": " ".join(sys.argv), "backend": args.backend, "lockstep": args.lockstep,
              "jobs": args.jobs,
              "max_seconds": args.max_seconds, "groups": groups, "sweep_exits": codes, "wall_seconds": wall, "runs": len(runs),
              "finished": finished, "complete": complete, "projected_tier_seconds": projection,
              "projection_is_estimate": not complete, "protocols": protocols, "verdicts": verdicts}
    groups_text = "; ".join(f"{only or 'all claims'}: {jobs} jobs" for only, jobs in groups)
    rows = [f"Claims default tier, run.backend = {args.backend}, lockstep {args.lockstep}, sweeps run at once: "
            f"{groups_text}; {line}",
            f"wall {wall:.0f} s, {finished}/{len(runs)} runs finished"
            + ("" if complete else f" (stopped at the {args.max_seconds:.0f} s cap); projected tier "
               + (f"{projection:.0f} s (estimate: sum of rounds x measured s/round / all jobs)"
                  if projection is not None else "not estimable (a protocol never started)")), "",
            "| protocol | runs | finished | started | rounds done / planned | s a round (per job) | finished run s (median) |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, row in protocols.items():
        walls = sorted(row["finished_walls"])
        median = f"{walls[len(walls) // 2]:.1f}" if walls else "-"
        spr = (f"{row['seconds_per_round']:.4f}" if row["seconds_per_round"] is not None else
               f"({row['projection_rate']:.4f} of {row['rate_from']})" if row["rate_from"] else "-")
        rows.append(f"| {name} | {row['runs']} | {row['finished']} | {row['started']} | "
                    f"{row['rounds_done']:,} / {row['planned_rounds']:,} | {spr} | {median} |")
    rows += [""] + verdicts
    write_results(args.out, "claims-gpu", record, "\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
