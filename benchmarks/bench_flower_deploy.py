"""Seconds per round of one fedhet config three ways: ``fedhet run`` (sequential backend), fedhet's Flower
apps in process (``fedhet.flower.local_grid.LocalGrid``), and the same apps on a real loopback deployment
(a SuperLink and SuperNodes on 127.0.0.1, ``flwr run``; docs/flower.md, "Speed").

    PYTHONPATH=src .venv/bin/python benchmarks/bench_flower_deploy.py [--config configs/flower/loopback_fedaware.toml]

Prints one line per way (median and each round's seconds) and writes them, with the machine line and
the load average, to benchmarks/results/flower-deploy-<time>.json. Rounds are timed by the run itself
(``wall_seconds`` of its records), so a deployment's figures exclude starting the processes but include
each round's ClientApp process start (Flower 1.41 starts one per message) and the SuperNodes' 3 s poll.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from machine import machine  # noqa: E402

from fedhet.config.schema import load_config  # noqa: E402


def per_round(seconds: list[float]) -> list[float]:
    """Per-round durations from cumulative ``wall_seconds``."""
    return [b - a for a, b in zip([0.0, *seconds[:-1]], seconds)]


def simulation(config, work: Path) -> list[float]:
    from fedhet.engine.runner import run_experiment

    run_experiment(config, work / "simulation")
    records = [json.loads(line) for line in (work / "simulation" / "metrics.jsonl").read_text().splitlines()]
    return per_round([r["wall_seconds"] for r in records])


def in_process(config) -> list[float]:
    from fedhet.flower import build
    from fedhet.flower.client_app import app as client_app
    from fedhet.flower.local_grid import LocalGrid
    from fedhet.flower.server_app import run_server
    from fedhet.flower.settings import AppSettings

    settings = AppSettings(config_text=build.config_text(config), min_nodes=2)
    nodes = [{"partition-id": 0, "num-partitions": 2}, {"partition-id": 1, "num-partitions": 2}]
    result = run_server(LocalGrid(client_app, nodes, settings.to_run_config()), settings)
    return per_round([r["wall_seconds"] for r in result.records])


def deployment(config, work: Path) -> list[float]:
    from fedhet.flower import build
    from fedhet.flower.deploy import start_loopback
    from fedhet.flower.settings import AppSettings, write_app

    settings = AppSettings(config_text=build.config_text(config), min_nodes=2, result_dir=str(work / "result"))
    app = write_app(work / "app", settings)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    with start_loopback(work / "flower", ["partition-id=0 num-partitions=2", "partition-id=1 num-partitions=2"],
                        env=env) as federation:
        federation.run_app(app, timeout=600)
    records = [json.loads(line) for line in (work / "result" / "metrics.jsonl").read_text().splitlines()]
    return per_round([r["wall_seconds"] for r in records])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "flower" / "loopback_fedaware.toml"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = load_config(args.config, ["run.progress=false"])
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-flower-") as tmp:
        work = Path(tmp)
        load_before = os.getloadavg()
        for name, measure in [("fedhet run (sequential)", lambda: simulation(config, work)),
                              ("Flower apps, in process (LocalGrid)", lambda: in_process(config)),
                              ("Flower apps, loopback SuperLink + 2 SuperNodes", lambda: deployment(config, work))]:
            seconds = measure()
            results[name] = {"median_seconds_per_round": statistics.median(seconds), "rounds": seconds}
            print(f"{name:48s} median {statistics.median(seconds):8.3f} s/round  "
                  f"({', '.join(f'{s:.3f}' for s in seconds)})", flush=True)
        load_after = os.getloadavg()
    out = ROOT / "benchmarks" / "results" / f"flower-deploy-{time.strftime('%Y%m%d-%H%M%S')}.json"
    payload = {"config": str(Path(args.config).relative_to(ROOT) if Path(args.config).is_relative_to(ROOT) else args.config),
               "machine": machine(f"torch {torch.__version__}"),
               "load_average_1min_before_after": [load_before[0], load_after[0]], "results": results}
    tmp_out = out.with_suffix(".json.tmp")
    tmp_out.write_text(json.dumps(payload, indent=2) + "\n")
    tmp_out.replace(out)
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
