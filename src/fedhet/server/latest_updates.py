"""A table of every client's latest update with its sum over all clients: the building block of
FedVarp (:mod:`fedhet.algorithms.fedvarp`) and MIFA (:mod:`fedhet.algorithms.mifa`).

The table ``y_n`` (one row per client, zero until client ``n`` first trains) is a per-client
:class:`~fedhet.core.store.ClientStore` (``context.make_store``: the run's storage dtype, device and
memory mapping, checkpointed with the run), so these methods cost ``N d`` memory (FedAU paper,
Section 5). A round sets ``y_n <- g_n`` for its participants (:meth:`LatestUpdateTable.replace`) and
the methods read ``(1/N) sum_{all n} y_n`` (:meth:`LatestUpdateTable.mean`). Two kernels keep that
sum, chosen by the method's ``server.kernel``:

- ``"fast"`` (default): incrementally. A round reads and rewrites only the ``|S|`` rows of its
  participants and adds ``sum_S (y_n_new - y_n_old)`` to a running sum, ``O(|S| d)`` work instead of
  ``O(N d)``. The running sum is accumulated in float64 from the rows *as stored* (read back after
  writing, so a bfloat16/float16 table and its sum agree): each round adds an error of order
  ``1e-16`` relative, so drift stays far below float32 resolution over any realistic run and no
  periodic recomputation is needed (the tests check it against the exact sum of the table).
- ``"reference"``: the plain sum ``sum_{all n} y_n`` of the whole table in float64, recomputed
  every round.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from fedhet.core.cohort import Cohort
from fedhet.core.store import ClientStore
from fedhet.server.aware_options import KERNELS
from fedhet.server.base import ServerContext


class LatestUpdates(NamedTuple):
    """The state of :class:`LatestUpdateTable`: the per-client table ``y_n`` (a store, written in
    place: a state holding it is consumed by the call that takes it, docs/design.md "State") and
    its float64 sum over all clients."""

    memory: ClientStore
    memory_sum: torch.Tensor


class LatestUpdateTable:
    """A per-client table of latest pseudo-gradients with its float64 sum over all clients
    (incremental with the fast kernel, recomputed by the reference; module docstring).

    Holds no state itself: its state (:class:`LatestUpdates`) lives in the aggregator's state.
    """

    def __init__(self, store_name: str, kernel: str = "fast"):
        if kernel not in KERNELS:
            raise ValueError(f"{store_name}: kernel must be one of {', '.join(KERNELS)}, got {kernel!r}")
        self.store_name = store_name
        self.reference = kernel == "reference"

    def init(self, params: torch.Tensor, context: ServerContext) -> LatestUpdates:
        return LatestUpdates(memory=context.make_store(self.store_name),
                             memory_sum=torch.zeros(params.numel(), dtype=torch.float64, device=params.device))

    @staticmethod
    def read(state: LatestUpdates, cohort: Cohort) -> torch.Tensor:
        """The stored rows of this round's clients, ``[|S|, d]`` in the updates' dtype and device."""
        rows = state.memory.read(cohort.client_ids, device=cohort.deltas.device)
        return rows.to(cohort.deltas.dtype)

    def replace(self, state: LatestUpdates, cohort: Cohort, old_rows: torch.Tensor) -> LatestUpdates:
        """Set ``y_n <- g_n`` for the cohort's clients and update the running sum; returns new state.

        Consumes ``state``: the store is written in place (it is the state's table); the sum is a
        new tensor.
        """
        state.memory.write(cohort.client_ids, cohort.pseudo_gradients)
        if self.reference:
            return state._replace(memory_sum=reference_sum(state.memory).to(state.memory_sum.device))
        return state._replace(memory_sum=_incremental_sum(state, cohort, old_rows))

    @staticmethod
    def mean(state: LatestUpdates, num_clients: int, like: torch.Tensor) -> torch.Tensor:
        """``(1/N) sum_{all n} y_n`` in ``like``'s dtype and device."""
        return (state.memory_sum / num_clients).to(device=like.device, dtype=like.dtype)

    @staticmethod
    def clients_seen(state: LatestUpdates) -> int:
        return int(state.memory.written.sum())


def reference_sum(store: ClientStore) -> torch.Tensor:
    """``sum_{all n} y_n`` of the whole table as stored, in float64 (the reference kernel)."""
    return store.table.to(torch.float64).sum(dim=0)


# float64 values per column block of the change on a CPU (1 MiB): the upcast rows and their
# difference stay in cache instead of being three fresh [|S|, d] float64 tensors a round.
_SUM_BLOCK_VALUES = 1 << 17
_ALIGN = 64


def change_of_rows(new_rows: torch.Tensor, old_rows: torch.Tensor) -> torch.Tensor:
    """``sum_k (new_rows[k] - old_rows[k])`` over the rows, in float64: each entry is
    ``(new.double() - old.double()).sum(dim=0)`` of its column. On a CPU it runs on cache-sized
    blocks of columns: a column's sum does not depend on the other columns, so the numbers are
    bitwise the whole-width expression (tests/server/test_server_latest_updates.py), and at
    |S| = 10, d = 199,210 it takes 2.8 ms instead of 24.8 (``benchmarks/bench_bookkeeping.py``)."""
    if new_rows.device.type != "cpu" or new_rows.shape[0] == 0:
        return (new_rows.to(torch.float64) - old_rows.to(torch.float64)).sum(dim=0)
    dim = new_rows.shape[1]
    change = torch.empty(dim, dtype=torch.float64, device=new_rows.device)
    # Block boundaries on multiples of 64 columns, where the whole-width kernel's vector lanes start:
    # a block starting elsewhere sums its first columns in the kernel's scalar tail, in another order.
    width = max(_ALIGN, _SUM_BLOCK_VALUES // new_rows.shape[0] // _ALIGN * _ALIGN)
    for first in range(0, dim, width):
        last = min(first + width, dim)
        difference = torch.sub(new_rows[:, first:last].to(torch.float64), old_rows[:, first:last].to(torch.float64))
        torch.sum(difference, dim=0, out=change[first:last])
    return change


def _incremental_sum(state: LatestUpdates, cohort: Cohort, old_rows: torch.Tensor) -> torch.Tensor:
    """The running sum plus ``sum_S (y_n_new - y_n_old)`` (the fast kernel; module docstring)."""
    # Read back what was stored (rounded to the storage dtype) so that the sum matches the table.
    new_rows = state.memory.read(cohort.client_ids, device=cohort.deltas.device)
    change = change_of_rows(new_rows, old_rows)
    return state.memory_sum + change.to(state.memory_sum.device)
