"""fedhet's ClientApp: any fedhet local solver on a SuperNode, its per-client state in ``Context.state``.

A SuperNode hosts a fixed set of fedhet client ids (:func:`hosted_clients`): ``node_config``
``client-ids="0,3,5"``, or ``partition-id=p num-partitions=M`` (clients ``i`` with ``i % M == p``), or,
with neither, all of them. It builds the federation of the run config's fedhet TOML (same data,
partition and model as ``fedhet run``, deterministic from the seed) and trains its sampled clients with
the code of the sequential backend (``SequentialBackend.train_cohort`` on a :class:`RoundWork` of its
clients), so client ``i`` computes in a deployment exactly what it computes in a simulation. Its solver
state (SCAFFOLD's ``c_i``, FedDyn's ``gradL_i``, FedSpeed's ``ghat_i``, ...) is read from and written back
to ``Context.state``, rounded through the run's storage dtype as the simulation's per-client store
rounds it (docs/flower.md).
"""
from __future__ import annotations

import functools
from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message
from flwr.clientapp import ClientApp

from fedhet.backends.base import RoundWork
from fedhet.backends.sequential import SequentialBackend
from fedhet.engine import deterministic_kernels
from fedhet.errors import FedhetError
from fedhet.flower import build
from fedhet.flower.messages import (
    TrainRequest,
    Upload,
    client_state_key,
    config_int,
    hosted_content,
    pending_round_key,
    pending_state_key,
    record_tensors,
    tensors_record,
)
from fedhet.flower.settings import AppSettings

app = ClientApp()


class NodeConfigError(FedhetError, ValueError):
    """A SuperNode's ``node_config`` names no valid set of fedhet clients."""


def hosted_clients(node_config: dict[str, Any], num_clients: int) -> list[int]:
    """The fedhet client ids this SuperNode hosts (module docstring)."""
    if "client-ids" in node_config:
        text = str(node_config["client-ids"])
        try:
            ids = sorted({int(part) for part in text.replace(",", " ").split()})
        except ValueError:
            raise NodeConfigError(f"node_config client-ids = {text!r}: expected client ids like \"0,3,5\"") from None
    elif "partition-id" in node_config or "num-partitions" in node_config:
        try:
            part, parts = int(node_config["partition-id"]), int(node_config["num-partitions"])
        except (KeyError, ValueError):
            raise NodeConfigError("node_config needs both partition-id and num-partitions (integers), "
                                  f"got {dict(node_config)}") from None
        if not 0 <= part < parts:
            raise NodeConfigError(f"node_config partition-id = {part}: allowed 0..num-partitions-1 = {parts - 1}")
        ids = list(range(part, num_clients, parts))
    else:
        ids = list(range(num_clients))
    bad = [i for i in ids if not 0 <= i < num_clients]
    if bad:
        raise NodeConfigError(f"node_config client-ids {bad[:5]}: the federation has clients 0..{num_clients - 1}")
    return ids


@functools.lru_cache(maxsize=2)
def _node(config_text: str) -> tuple[Any, Any, Any, str]:
    """(config, federation, solver, fingerprint) of a run config; cached, so a process that handles
    several messages (an in-process grid) builds the federation once."""
    from fedhet.algorithms import build as build_algorithm
    from fedhet.engine import config_fingerprint

    config = build.config_from_text(config_text)
    build.check_deployable(config)
    federation = build.build_federation(config)
    solver = build_algorithm(config).solver
    return config, federation, solver, config_fingerprint(config)["sha256"]


@app.query()
def query(msg: Message, context: Context) -> Message:
    """Which fedhet clients this node hosts (the ServerApp asks once, before round 1)."""
    settings = AppSettings.from_run_config(context.run_config)
    config, federation, _, fingerprint = _node(settings.config_text)
    ids = hosted_clients(context.node_config, federation.task.num_clients)
    return Message(hosted_content(ids, federation.task.num_clients, fingerprint), reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """One round of the node's sampled clients; their solver state in and out of ``Context.state``."""
    settings = AppSettings.from_run_config(context.run_config)
    config, federation, solver, fingerprint = _node(settings.config_text)
    task = federation.task
    request = TrainRequest.from_content(msg.content, task.device)
    if request.fingerprint != fingerprint:
        raise FedhetError("this SuperNode built its federation from a different fedhet config than the "
                          "ServerApp's (config fingerprints differ)")
    hosted = set(hosted_clients(context.node_config, task.num_clients))
    strangers = sorted(set(request.client_ids) - hosted)
    if strangers:
        raise NodeConfigError(f"asked to train clients {strangers[:5]}, which this node does not host")
    client_ids = torch.tensor(sorted(request.client_ids), dtype=torch.int64)
    settle_pending(context, dict(zip(request.client_ids, request.accepted_rounds)))
    states = read_states(context, solver.client_state_names, client_ids, task)
    work = RoundWork(round_index=request.round_index, seed=config.run.seed, params=request.params.to(task.dtype),
                     client_ids=client_ids, client_states=states, broadcast=request.broadcast,
                     learning_rate=request.learning_rate)
    with deterministic_kernels(task.device):
        cohort, new_states = SequentialBackend().train_cohort(task, solver, work)
    write_states(context, new_states, client_ids, build.storage_dtype(config), task.dtype,
                 round_index=request.round_index)
    upload = Upload(client_ids=cohort.client_ids, deltas=cohort.deltas, num_examples=cohort.num_examples,
                    local_steps=cohort.local_steps, train_loss=cohort.train_loss, extras=cohort.extras)
    return Message(upload.to_content(), reply_to=msg)


def read_states(context: Context, names: tuple[str, ...], client_ids: torch.Tensor, task: Any) -> dict[str, torch.Tensor]:
    """``{name: [K, d]}`` rows of the clients' solver state; zeros for a client's first round (as a
    simulation's store reads rows never written)."""
    if not names:
        return {}
    rows: dict[str, list[torch.Tensor]] = {name: [] for name in names}
    for client_id in client_ids.tolist():
        key = client_state_key(client_id)
        saved = record_tensors(context.state.array_records[key], task.device) if key in context.state else {}
        for name in names:
            row = saved.get(name)
            rows[name].append(row.to(task.dtype) if row is not None
                              else torch.zeros(task.spec.dim, dtype=task.dtype, device=task.device))
    return {name: torch.stack(values) for name, values in rows.items()}


def write_states(context: Context, new_states: dict[str, torch.Tensor], client_ids: torch.Tensor,
                 storage: torch.dtype, compute: torch.dtype, *, round_index: int) -> None:
    """Keep each client's new state, rounded to the storage dtype and read back in the compute dtype,
    which is what a simulation's per-client store holds (``store.ClientStore.write``/``read``). It is
    kept pending for ``round_index`` until :func:`settle_pending` learns the server accepted it."""
    for k, client_id in enumerate(client_ids.tolist()):
        row = {name: value[k].to(storage).to(compute) for name, value in new_states.items()}
        context.state[pending_state_key(client_id)] = tensors_record(row) if row else ArrayRecord()
        context.state[pending_round_key(client_id)] = ConfigRecord({"round": int(round_index)})


def settle_pending(context: Context, accepted_rounds: dict[int, int]) -> None:
    """Commit or drop each client's pending state before it trains again: committed when the server
    accepted the round that produced it (``accepted_rounds[client]``, from the ``train`` message),
    dropped otherwise. A reply that arrived after ``round-timeout`` was counted as absent, so its
    state must not advance either: the clients then hold exactly the state of the simulation in which
    they were absent that round (docs/flower.md, "Failures")."""
    for client_id, accepted in accepted_rounds.items():
        pending, round_key = pending_state_key(client_id), pending_round_key(client_id)
        if pending not in context.state:
            continue
        if config_int(context.state.config_records[round_key], "round") == accepted:
            context.state[client_state_key(client_id)] = context.state[pending]
        del context.state[pending]
        del context.state[round_key]
