"""fedhet's ServerApp: any fedhet server method, with its state, over a Flower federation.

The ServerApp reuses fedhet's round logic as it is: a :class:`fedhet.engine.simulator.Simulator`
(participation sample -> ``server.broadcast`` -> cohort -> ``server.step``) whose
backend is :class:`fedhet.flower.backend.FlowerBackend`, so the server method's state (FedAWARE's
momenta and Gram matrix, FedAU's interval statistics, FedVarp/MIFA tables, the AWARE projection, the
server halves of SCAFFOLD/FedDyn/FedADMM/FedSpeed) is the simulation's, updated by the same code. Only
the per-client solver state moves: it lives on the SuperNodes (:mod:`fedhet.flower.client_app`).

Run config keys: :mod:`fedhet.flower.settings`. Results: ``result-dir``/``params.pt`` (the final model),
``metrics.jsonl`` (one record per round, test metrics every ``run.eval_every`` rounds),
``participation.pt`` and ``summary.json`` (with the failures), each written atomically.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Any

import torch
from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedhet.engine import Simulator, simulator_from_config
from fedhet.flower import build
from fedhet.flower.backend import ConnectedClients, FlowerBackend, discover_nodes
from fedhet.flower.settings import AppSettings

logger = logging.getLogger(__name__)
app = ServerApp()


class DeploymentSimulator(Simulator):
    """The simulator's rounds with the per-client solver state on the clients: the server keeps no
    ``[N, d]`` client stores (the server method's own tables are still made by ``make_store``)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.client_stores = {}


@dataclasses.dataclass
class ServerResult:
    params: torch.Tensor
    records: list[dict[str, Any]]
    participation: torch.Tensor          # [rounds, N] bool: who trained (arrived) in which round
    failures: list[dict[str, Any]]
    hosts: dict[int, list[int]]


def run_server(grid: Grid, settings: AppSettings) -> ServerResult:
    """Run ``run.rounds`` rounds of the config's method over the SuperNodes of ``grid``."""
    from fedhet.core.task import evaluate
    from fedhet.engine import check_run_resources, config_fingerprint

    config = build.config_from_text(settings.config_text)
    build.check_deployable(config)
    federation = build.build_federation(config)
    task = federation.task
    # The memory and disk estimate of `fedhet run` (the [N, d] stores of FedAWARE, SCAFFOLD, ...): a run
    # too large for the ServerApp's machine stops here in one line, before any node is asked.
    check_run_resources(config, task, Path(settings.result_dir or "."), lambda message: logger.warning("%s", message))
    fingerprint = config_fingerprint(config)["sha256"]
    hosts = discover_nodes(grid, min_nodes=settings.min_nodes, connect_timeout=settings.connect_timeout,
                           num_clients=task.num_clients, fingerprint=fingerprint,
                           query_timeout=settings.connect_timeout,
                           require_all_clients=settings.participation == "fedhet")
    logger.info("fedhet on Flower: %d SuperNode(s) host %d of %d clients", len(hosts),
                sum(len(ids) for ids in hosts.values()), task.num_clients)
    backend = FlowerBackend(grid, hosts, round_timeout=settings.round_timeout, fingerprint=fingerprint)
    # The Simulator of `fedhet run` (fedhet.engine.assembly), with its clients on the SuperNodes;
    # participation "fedhet" is the config's process (None), "nodes" every connected client.
    participation = None if settings.participation == "fedhet" else ConnectedClients(backend)
    simulator = simulator_from_config(config, federation, backend=backend, participation=participation,
                                      simulator_type=DeploymentSimulator)
    records = []
    out = Path(settings.result_dir) if settings.result_dir else None
    started = time.perf_counter()
    for _ in range(config.run.rounds):
        record, _ = simulator.run_round()
        round_number = record["round"]
        if round_number % config.run.eval_every == 0 or round_number == config.run.rounds:
            record["test_loss"], record["test_accuracy"] = evaluate(task, simulator.params,
                                                                    batch_size=config.run.eval_batch_size)
        record["wall_seconds"] = time.perf_counter() - started
        record["failed_clients"] = sum(len(f["clients"]) for f in backend.failures if f["round"] == round_number)
        records.append(record)
        logger.info("round %d: %d client(s) trained%s", round_number, record["num_participants"],
                    f", test accuracy {record['test_accuracy']:.4f}" if "test_accuracy" in record else "")
        if out is not None:
            _write_metrics(out, records)
    result = ServerResult(params=simulator.params.detach().cpu(), records=records,
                          participation=simulator.participation_log.clone(), failures=list(backend.failures),
                          hosts=hosts)
    if out is not None:
        write_result(out, result, config)
    return result


def _write_metrics(out: Path, records: list[dict[str, Any]]) -> None:
    from fedhet.core.io import atomic_write_text

    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in records))


def write_result(out: Path, result: ServerResult, config: Any) -> None:
    from fedhet.core.io import atomic_torch_save, atomic_write_json

    out.mkdir(parents=True, exist_ok=True)
    atomic_torch_save(out / "params.pt", result.params)
    atomic_torch_save(out / "participation.pt", result.participation)
    last = result.records[-1] if result.records else {}
    atomic_write_json(out / "summary.json", {
        "name": config.run.name, "rounds": len(result.records),
        "final_accuracy": last.get("test_accuracy"), "failures": result.failures,
        "hosts": {str(node): ids for node, ids in result.hosts.items()}})


ERROR_FILE = "error.txt"
RESULT_FILES = ("params.pt", "participation.pt", "metrics.jsonl", "summary.json", ERROR_FILE)


@app.main()
def main(grid: Grid, context: Context) -> None:
    """The ServerApp. With a result dir, an earlier run's results are removed first and a failure
    leaves its one line in ``error.txt`` there, so the command that reads the results reports the
    ServerApp's own error rather than a missing ``params.pt``."""
    out = Path(str(context.run_config.get("result-dir", ""))) if context.run_config.get("result-dir") else None
    if out is not None:
        for name in RESULT_FILES:
            (out / name).unlink(missing_ok=True)
    try:
        settings = AppSettings.from_run_config(context.run_config)
        run_server(grid, settings)
    except BaseException as error:
        if out is not None:
            from fedhet.core.io import atomic_write_text
            from fedhet.error_lines import error_line

            line = error_line(error)[0] if isinstance(error, Exception) else f"fedhet: {type(error).__name__}"
            atomic_write_text(out / ERROR_FILE, line.removeprefix("fedhet: ") + "\n")
        raise
