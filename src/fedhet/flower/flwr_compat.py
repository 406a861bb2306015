"""The one place the Flower bridge reaches past Flower's public API, and the versions it was checked on.

Flower's public ``Message(content, dst_node_id=..., message_type=...)`` takes the message's run and
source node from the process's task identity (``flwr.supercore.task_identity.TaskIdentity``), which
Flower's runtime sets in a deployment's ServerApp process and its legacy ``start_grid`` sets by hand;
an in-process grid (:mod:`fedhet.flower.local_grid`) must set it the same way. A message's id has no
public setter either: Flower's own grids write ``metadata.__dict__["_message_id"]``, and so does the
local grid, through :func:`set_message_id`.

These are internals: ``tests/flower/test_flower_compat.py`` checks them on the installed Flower and
fails on a Flower whose minor version is not in :data:`CHECKED_ON`, so that widening the ``flower``
extra's pin (pyproject.toml) means checking them again.
"""
from __future__ import annotations

from typing import Any

import flwr
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode

from fedhet.errors import FedhetError

# Flower minor versions on which the internals below were checked (and the loopback tests passed).
CHECKED_ON = ("1.41", "1.42")

CLIENT_APP_RAISED_EXCEPTION = ErrorCode.CLIENT_APP_RAISED_EXCEPTION

try:
    from flwr.supercore.task_identity import TaskIdentity
except ImportError:  # pragma: no cover - only on a Flower outside CHECKED_ON
    raise FedhetError(
        f"the Flower bridge was checked on Flower {', '.join(CHECKED_ON)}; Flower {flwr.__version__} has no "
        "flwr.supercore.task_identity: install a checked version with pip install 'fedhet[flower]'") from None

__all__ = ["CHECKED_ON", "CLIENT_APP_RAISED_EXCEPTION", "SUPERLINK_NODE_ID", "set_message_id", "set_task_identity"]


def set_task_identity(run_id: int, node_id: int = SUPERLINK_NODE_ID, task_id: int = 1) -> None:
    """Make this process the ServerApp task of run ``run_id``, as Flower's runtime does: messages
    created afterwards carry this run and source node."""
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = task_id, run_id, node_id


def set_message_id(message: Any, message_id: str) -> None:
    """Give ``message`` the id a SuperLink would (``Metadata.message_id`` is read-only)."""
    message.metadata.__dict__["_message_id"] = message_id
