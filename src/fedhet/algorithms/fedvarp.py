"""FedVarp (Jhunjhunwala et al., UAI 2022)

Jhunjhunwala, Sharma, Nagarkatti, Joshi, "FedVARP: Tackling the Variance Due to Partial Client
Participation in Federated Learning" (UAI 2022), Algorithm 1. The server keeps the latest update
``y_n`` of every client (zero until client ``n`` first trains) and corrects this round's average by
it, a SAGA-style variance reduction over the clients::

    G = (1/|S|) sum_{n in S} (g_n - y_n) + (1/N) sum_{all n} y_n      (memories from before this round)
    y_n <- g_n  for n in S,          x <- x - eta_g G

with ``g_n = x - y_n^local`` (docs/algorithms.md section 1). A round with no participant takes no
step (the first term is undefined for ``|S| = 0``). The table and its sum are the building block
:mod:`fedhet.server.latest_updates` (shared with MIFA; ``server.kernel`` chooses the incremental
sum or the plain recomputed one).

Rule table server:
    | FedVarp (Jhunjhunwala 2022) | server keeps `y_n` (init 0) for every client; `G = (1/|S|) sum_S (g_n - y_n) + (1/N) sum_all y_n` (the sum over all uses the memories from before this round), then `y_n <- g_n` for n in S | `x <- x - eta_g G` |

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
class FedVarpOptions(ServerOptions):
    """``[server]`` options of ``fedvarp``."""

    kernel: str = kernel_option()


# FedVarp's state: the table y_n (a per-client store, written in place: docs/design.md "State") and
# its float64 sum over all clients.
FedVarpState = LatestUpdates


class FedVarpAggregator:
    """``G = mean_S(g_n - y_n) + mean_all(y_n)``, then ``y_n <- g_n`` on S (module docstring)."""

    def __init__(self, kernel: str = "fast") -> None:
        self.table = LatestUpdateTable("fedvarp-memory", kernel)

    def init(self, params: torch.Tensor, context: ServerContext) -> FedVarpState:
        return self.table.init(params, context)

    def aggregate(self, state: FedVarpState, cohort: Cohort,
                  context: ServerContext) -> tuple[Optional[torch.Tensor], FedVarpState, dict[str, float]]:
        if len(cohort) == 0:
            return None, state, {}
        old_rows = self.table.read(state, cohort)                                    # y_n, n in S
        correction = (cohort.pseudo_gradients - old_rows).mean(dim=0)                # (1/|S|) sum_S (g_n - y_n)
        pseudo_gradient = correction + self.table.mean(state, context.num_clients, correction)  # + (1/N) sum y_n
        new_state = self.table.replace(state, cohort, old_rows)                      # y_n <- g_n on S
        return pseudo_gradient, new_state, {"memory_clients_seen": float(self.table.clients_seen(new_state))}


@SERVERS.register("fedvarp", FedVarpOptions, gradient_step=True)
def make_fedvarp(options: FedVarpOptions) -> ComposedServer:
    """FedVarp: G = mean_S(g_n - y_n) + mean_all(y_n); y_n <- g_n on S; x <- x - eta_g G (Jhunjhunwala et al. 2022)."""
    return server_method(FedVarpAggregator(options.kernel), SGDOptimizer(options.learning_rate), options)
