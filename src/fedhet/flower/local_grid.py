"""An in-process Flower ``Grid``: the ServerApp's messages handed straight to ClientApps in this process.

It runs the same code paths as a deployment above the transport: Flower's ``ServerApp`` and
``ClientApp`` objects (their ``__call__``, handler dispatch by message type, ``Message``/``RecordDict``
replies and ``Context.state``), fedhet's ``main``/``train``/``query`` handlers and serialisation. What it
leaves out is the SuperLink, the SuperNodes' processes and the network; a real deployment is
:mod:`fedhet.flower.deploy`. Used by the tests (many methods in seconds) and notebooks.

``drop(node_id)`` disconnects a node: it leaves ``get_node_ids`` and messages to it get no reply, as a
SuperNode that died. A ClientApp that raises gets an error reply, as on a SuperNode
(``flwr.supernode.runtime.run_clientapp``).
"""
from __future__ import annotations

from typing import Any, Iterable, Optional
from uuid import uuid4

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from fedhet.flower.flwr_compat import CLIENT_APP_RAISED_EXCEPTION, set_message_id, set_task_identity


class LocalGrid(Grid):
    """Nodes ``1..M``, node ``m`` with ``node_configs[m - 1]``, each with its own ``Context.state``."""

    def __init__(self, client_app: ClientApp, node_configs: list[dict[str, Any]], run_config: dict[str, Any],
                 run_id: int = 1):
        self.client_app = client_app
        self.run_config = dict(run_config)
        self.run_id = run_id
        self.contexts = {m + 1: Context(run_id=run_id, node_id=m + 1, node_config=dict(config),
                                        state=RecordDict(), run_config=dict(run_config))
                         for m, config in enumerate(node_configs)}
        self.dropped: set[int] = set()
        # Messages take their run and source from the process's task identity, which Flower's
        # runtime sets in a deployment's ServerApp process (fedhet.flower.flwr_compat).
        set_task_identity(run_id)
        self.replies: dict[str, Message] = {}
        self.sent: list[tuple[int, str]] = []          # (node, message type) of every delivered message

    def drop(self, node_id: int) -> None:
        self.dropped.add(node_id)

    # --- Grid ---------------------------------------------------------------------------------------
    def set_run(self, run_id: int) -> None:
        self.run_id = run_id

    @property
    def run(self) -> Any:
        return self.run_id

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str,
                       ttl: Optional[float] = None) -> Message:
        return Message(content, dst_node_id=dst_node_id, message_type=message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        return [node for node in self.contexts if node not in self.dropped]

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Deliver each message to its node's ClientApp now; its reply waits for :meth:`pull_messages`.
        A message to a dropped node gets an id and never a reply."""
        ids = []
        for message in messages:
            node_id = message.metadata.dst_node_id
            message_id = str(uuid4())
            set_message_id(message, message_id)
            ids.append(message_id)
            if node_id in self.dropped or node_id not in self.contexts:
                continue
            self.sent.append((node_id, message.metadata.message_type))
            try:
                reply = self.client_app(message, self.contexts[node_id])
            except Exception as error:  # noqa: BLE001  (what a SuperNode does with a ClientApp's exception)
                reply = Message(Error(code=CLIENT_APP_RAISED_EXCEPTION,
                                      reason=f"{type(error)}:<'{error}'>"), reply_to=message)
            self.replies[message_id] = reply
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self.replies.pop(message_id) for message_id in list(message_ids) if message_id in self.replies]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: Optional[float] = None) -> Iterable[Message]:
        return self.pull_messages(self.push_messages(messages))


def run_local(server_app: ServerApp, grid: LocalGrid) -> None:
    """Run ``server_app``'s main on ``grid`` (the run config is the grid's)."""
    context = Context(run_id=grid.run_id, node_id=0, node_config={}, state=RecordDict(), run_config=grid.run_config)
    server_app(grid, context)
