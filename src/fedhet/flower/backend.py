"""The ServerApp's execution backend: a round's cohort trained by SuperNodes through Flower's ``Grid``.

:class:`FlowerBackend` has the interface of fedhet's backends (``train_cohort(task, solver, work) ->
(cohort, new_client_states)``, ``backends/base.py``), so the round logic of
:class:`fedhet.engine.simulator.Simulator` runs unchanged on top of it. For each SuperNode that hosts
sampled clients it sends one ``train`` message (x, round, the node's client ids, the solver's broadcast,
eta_l) and builds the :class:`Cohort` from the replies, rows sorted by client id as every backend's.

Failures (docs/flower.md, "Failures"): a node that is not connected, replies with an error, or does not
reply within ``round_timeout`` seconds contributes no rows; its clients count as not having participated
that round. The per-client state stays on the nodes, so ``new_client_states`` is always empty.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Iterable, Optional

import torch
from flwr.app import Message, RecordDict

from fedhet.backends.base import RoundWork
from fedhet.client.base import LocalSolver
from fedhet.core.cohort import Cohort
from fedhet.core.task import FederatedTask
from fedhet.errors import FedhetError
from fedhet.flower.messages import TrainRequest, Upload, hosted_from_content

logger = logging.getLogger(__name__)


# Seconds between the ServerApp's polls for replies. Flower's own Grid.send_and_receive sleeps 3 s
# between polls (flwr 1.41), which alone would add up to 3 s to every round of a small model.
REPLY_POLL_SECONDS = 0.1


def exchange(grid: Any, messages: list[Message], timeout: float) -> list[tuple[int, Message]]:
    """``grid.send_and_receive`` with a short poll interval: push ``messages``, then pull replies until
    all have arrived or ``timeout`` seconds have passed (those missing then are simply absent).

    Returns ``(node id, reply)`` pairs, the node being the one the answered message was sent to: an
    error reply made by the SuperLink for an unreachable node carries the SuperLink's id as its source."""
    destinations = [message.metadata.dst_node_id for message in messages]
    pushed = list(grid.push_messages(messages))
    node_of = dict(zip(pushed, destinations))
    pending = set(pushed)
    deadline = time.monotonic() + timeout
    replies: list[tuple[int, Message]] = []
    while pending:
        arrived: list[Message] = list(grid.pull_messages(pending))
        for reply in arrived:
            answered = reply.metadata.reply_to_message_id
            replies.append((node_of.get(answered, reply.metadata.src_node_id), reply))
            pending.discard(answered)
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(REPLY_POLL_SECONDS)
    return replies


class DeploymentError(FedhetError, RuntimeError):
    """The Flower federation cannot run the config (too few SuperNodes, clients hosted by nobody,
    SuperNodes built from another config)."""


def discover_nodes(grid: Any, *, min_nodes: int, connect_timeout: float, num_clients: int, fingerprint: str,
                   query_timeout: float, require_all_clients: bool) -> dict[int, list[int]]:
    """``{node_id: hosted client ids}`` of the connected SuperNodes, after waiting (at most
    ``connect_timeout`` s) for ``min_nodes`` of them. A node hosting a client another node hosts, or
    built from another config, is an error; so is a client hosted by nobody when ``require_all_clients``."""
    deadline = time.monotonic() + connect_timeout
    node_ids = list(grid.get_node_ids())
    while len(node_ids) < min_nodes:
        if time.monotonic() > deadline:
            raise DeploymentError(f"{len(node_ids)} SuperNode(s) connected after {connect_timeout:g} s; "
                                  f"the run config asks for min-nodes = {min_nodes}")
        time.sleep(0.5)
        node_ids = list(grid.get_node_ids())
    queries = [Message(RecordDict(), dst_node_id=node_id, message_type="query", ttl=query_timeout)
               for node_id in node_ids]
    hosts: dict[int, list[int]] = {}
    owner: dict[int, int] = {}
    for node_id, reply in exchange(grid, queries, query_timeout):
        if reply.has_error():
            # Left out of the run (its clients count as hosted by nobody), as a node that did not answer.
            logger.warning("SuperNode %d answered the query with an error; it takes no part in this run: %s",
                           node_id, reply.error.reason)
            continue
        ids, node_clients, node_fingerprint = hosted_from_content(reply.content)
        if node_fingerprint != fingerprint or node_clients != num_clients:
            raise DeploymentError(f"SuperNode {node_id} built its federation from a different fedhet config "
                                  f"({node_clients} clients, fingerprint {node_fingerprint[:12]})")
        for client_id in ids:
            if client_id in owner:
                raise DeploymentError(f"client {client_id} is hosted by SuperNodes {owner[client_id]} and {node_id}; "
                                      "give each node its own partition-id or client-ids")
            owner[client_id] = node_id
        hosts[node_id] = ids
    if len(hosts) < min_nodes:
        raise DeploymentError(f"{len(hosts)} of {len(node_ids)} SuperNode(s) answered the query within "
                              f"{query_timeout:g} s; min-nodes = {min_nodes}")
    missing = sorted(set(range(num_clients)) - set(owner))
    if require_all_clients and missing:
        raise DeploymentError(f"clients {missing[:10]} ({len(missing)} in all) are hosted by no connected SuperNode; "
                              "the participation process may sample any of the config's clients")
    return hosts


class FlowerBackend:
    """fedhet backend whose clients are Flower SuperNodes (module docstring)."""

    name = "flower"

    def __init__(self, grid: Any, hosts: dict[int, list[int]], *, round_timeout: float, fingerprint: str):
        self.grid = grid
        self.hosts = hosts
        self.owner = {client_id: node_id for node_id, ids in hosts.items() for client_id in ids}
        self.round_timeout = round_timeout
        self.fingerprint = fingerprint
        self.failures: list[dict[str, Any]] = []    # one entry per failed node and round
        # Client id -> the round (0-based) of its last reply this server accepted; sent back to the
        # nodes, which commit a client's new state only for that round (client_app.settle_pending).
        self.accepted: dict[int, int] = {}

    def connected_clients(self) -> list[int]:
        """Clients hosted by the SuperNodes connected now (``participation = "nodes"``)."""
        connected = set(self.grid.get_node_ids())
        return sorted(c for node, ids in self.hosts.items() if node in connected for c in ids)

    def _fail(self, round_index: int, node_id: int, client_ids: Iterable[int], reason: str) -> None:
        ids = sorted(client_ids)
        logger.warning("round %d: SuperNode %d (clients %s) failed: %s", round_index + 1, node_id, ids, reason)
        self.failures.append({"round": round_index + 1, "node": node_id, "clients": ids, "reason": reason})

    def close(self) -> None:
        """Nothing to release: the grid and the SuperNodes belong to the ServerApp's caller."""

    def train_cohort(self, task: FederatedTask, solver: LocalSolver,
                     work: RoundWork) -> tuple[Cohort, dict[str, torch.Tensor]]:
        by_node: dict[int, list[int]] = {}
        for client_id in work.client_ids.tolist():
            by_node.setdefault(self.owner[client_id], []).append(client_id)
        connected = set(self.grid.get_node_ids())
        messages = []
        for node_id, ids in by_node.items():
            if node_id not in connected:
                self._fail(work.round_index, node_id, ids, "not connected")
                continue
            request = TrainRequest(round_index=work.round_index, client_ids=ids, params=work.params,
                                   broadcast=work.broadcast, learning_rate=work.learning_rate,
                                   fingerprint=self.fingerprint,
                                   accepted_rounds=[self.accepted.get(c, -1) for c in ids])
            # TTL = the round's timeout: a node that comes back later never trains a stale round.
            messages.append(Message(request.to_content(), dst_node_id=node_id, message_type="train",
                                    ttl=self.round_timeout))
        uploads: list[Upload] = []
        answered: set[int] = set()
        if messages:
            for node_id, reply in exchange(self.grid, messages, self.round_timeout):
                answered.add(node_id)
                if reply.has_error():
                    self._fail(work.round_index, node_id, by_node.get(node_id, []), f"error reply: {reply.error.reason}")
                    continue
                upload = Upload.from_content(reply.content)
                if sorted(upload.client_ids.tolist()) != sorted(by_node.get(node_id, [])):
                    self._fail(work.round_index, node_id, by_node.get(node_id, []),
                               f"replied for clients {upload.client_ids.tolist()}")
                    continue
                uploads.append(upload)
                for client_id in upload.client_ids.tolist():
                    self.accepted[int(client_id)] = work.round_index
        for message in messages:
            node_id = message.metadata.dst_node_id
            if node_id not in answered:
                self._fail(work.round_index, node_id, by_node[node_id], f"no reply within {self.round_timeout:g} s")
        return assemble_cohort(uploads, task), {}


def assemble_cohort(uploads: list[Upload], task: Any) -> Cohort:
    """One :class:`Cohort` from the nodes' rows, sorted by client id (the order every backend uses, so
    the aggregation adds the rows in the simulation's order), with the sequential backend's dtypes and
    devices."""
    if not uploads:
        return Cohort.empty(task.spec.dim, task.dtype, task.device)
    ids = torch.cat([u.client_ids for u in uploads])
    order = torch.argsort(ids)

    def rows(tensors: list[torch.Tensor], device: Optional[torch.device] = None, dtype=None) -> torch.Tensor:
        stacked = torch.cat(tensors).index_select(0, order)
        return stacked.to(device=device or stacked.device, dtype=dtype or stacked.dtype)

    extras_names = uploads[0].extras.keys()
    return Cohort(client_ids=ids.index_select(0, order),
                  deltas=rows([u.deltas for u in uploads], task.device, task.dtype),
                  num_examples=rows([u.num_examples for u in uploads]),
                  local_steps=rows([u.local_steps for u in uploads]),
                  train_loss=rows([u.train_loss for u in uploads]),
                  extras={name: rows([u.extras[name] for u in uploads], task.device) for name in extras_names})


class ConnectedClients:
    """Participation ``"nodes"``: every client hosted by a connected SuperNode trains every round.

    No probabilities are known (``probabilities`` is None), so methods that need them (e.g.
    ``known_participation``) refuse it as they refuse any process without them."""

    def __init__(self, backend: FlowerBackend):
        self.backend = backend

    def init(self, context: Any) -> dict[str, Any]:
        return {}

    def sample(self, state: dict[str, Any], round_index: int, context: Any) -> tuple[torch.Tensor, dict[str, Any]]:
        return torch.tensor(self.backend.connected_clients(), dtype=torch.int64), state

    def probabilities(self, state: dict[str, Any]) -> None:
        return None

    def explores(self) -> bool:
        return False
