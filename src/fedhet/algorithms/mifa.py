"""MIFA (Gu et al., NeurIPS 2021)

Gu, Huang, Zhang, Zhang, "Fast Federated Learning in the Presence of Arbitrary Device
Unavailability" (NeurIPS 2021), Algorithm 1. The server keeps the latest update ``y_n`` of every
client (zero until client ``n`` first trains) and steps along their average, in which the stored
updates stand in for the clients that did not participate::

    y_n <- g_n  for n in S,          G = (1/N) sum_{all n} y_n,          x <- x - eta_g G

with ``g_n = x - y_n^local`` (docs/algorithms.md section 1), applied in every round, also when
nobody participated. The table and its sum are the building block
:mod:`fedhet.server.latest_updates` (shared with FedVarp; ``server.kernel`` chooses the incremental
sum or the plain recomputed one).

Rule table server:
    | MIFA (Gu 2021) | server keeps the latest `g_n` of every client (0 if never seen); `G = (1/N) sum_all y_n`, applied even if nobody participated | `x <- x - eta_g G` |

Metric: ``memory_clients_seen`` (clients whose ``y_n`` has been written).
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from fedhet.core.cohort import Cohort
from fedhet.core.registry import SERVERS
from fedhet.server.aware_options import kernel_option
from fedhet.server.base import ComposedServer, ServerContext, ServerOptions, SGDOptimizer
from fedhet.server.latest_updates import LatestUpdates, LatestUpdateTable
from fedhet.server.methods import server_method


@dataclasses.dataclass(frozen=True)
class MIFAOptions(ServerOptions):
    """``[server]`` options of ``mifa``."""

    kernel: str = kernel_option()


# MIFA's state: the table y_n (a per-client store, written in place: docs/design.md "State") and
# its float64 sum over all clients.
MIFAState = LatestUpdates


class MIFAAggregator:
    """``y_n <- g_n`` on S, then ``G = mean_all(y_n)``, every round (module docstring)."""

    def __init__(self, kernel: str = "fast") -> None:
        self.table = LatestUpdateTable("mifa-memory", kernel)

    def init(self, params: torch.Tensor, context: ServerContext) -> MIFAState:
        return self.table.init(params, context)

    def aggregate(self, state: MIFAState, cohort: Cohort,
                  context: ServerContext) -> tuple[Optional[torch.Tensor], MIFAState, dict[str, float]]:
        if len(cohort) > 0:
            state = self.table.replace(state, cohort, self.table.read(state, cohort))   # y_n <- g_n on S
        pseudo_gradient = self.table.mean(state, context.num_clients, cohort.deltas)     # (1/N) sum_all y_n
        return pseudo_gradient, state, {"memory_clients_seen": float(self.table.clients_seen(state))}


@SERVERS.register("mifa", MIFAOptions, gradient_step=True)
def make_mifa(options: MIFAOptions) -> ComposedServer:
    """MIFA: y_n <- g_n on S; G = (1/N) sum_all y_n, every round; x <- x - eta_g G (Gu et al. 2021)."""
    return server_method(MIFAAggregator(options.kernel), SGDOptimizer(options.learning_rate), options)
