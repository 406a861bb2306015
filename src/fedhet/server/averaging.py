"""The plain averages of the participants' pseudo-gradients, aggregators shared by several methods.

Conventions of docs/algorithms.md section 1: clients upload ``delta_i = y_i - x``, the server works
with ``g_i = -delta_i``, an aggregator returns ``G`` and the server optimiser steps ``x <- x - u(G)``.
Each aggregator here keeps no state and gives no ``G`` (no step) in a round without participants.

- :class:`WeightedAverageAggregator`: ``G = sum_S p_i g_i``, ``p_i = n_i / n_S`` (FedAvg, McMahan et
  al. 2017; also FedAvgM and the adaptive methods of Reddi et al. 2021 and Wang, Lin, Chen 2022);
- :class:`AverageParticipatingAggregator`: ``G = (1/|S|) sum_S g_i`` (SCAFFOLD, Karimireddy et al.
  2020, Algorithm 1; FedSpeed's paper rule; the FedAU paper's "average participating" baseline);
- :class:`AverageAllAggregator`: ``G = (1/N) sum_S g_i`` (FedADMM; the FedAU paper's "average all").
"""
from __future__ import annotations

import torch

from fedhet.server.base import NoState, ServerContext, data_size_weights


class WeightedAverageAggregator:
    """``G = sum_{i in S} p_i g_i`` with data-size weights (FedAvg, McMahan et al. 2017)."""

    def init(self, params: torch.Tensor, context: ServerContext) -> NoState:
        return NoState()

    def aggregate(self, state, cohort, context):
        if len(cohort) == 0:
            return None, state, {}
        # -(p @ deltas) is bitwise p @ (-deltas) (negation commutes with rounding) without the
        # negated [K, d] copy.
        return -(data_size_weights(cohort) @ cohort.deltas), state, {}


class AverageParticipatingAggregator:
    """``G = (1/|S|) sum_S g_n``: the plain mean of the participants' updates. No state."""

    def init(self, params: torch.Tensor, context: ServerContext) -> NoState:
        return NoState()

    def aggregate(self, state, cohort, context):
        if len(cohort) == 0:
            return None, state, {}
        return cohort.pseudo_gradients.mean(dim=0), state, {}


class AverageAllAggregator:
    """``G = (1/N) sum_S g_n``: the sum of the participants' updates over all N clients. No state."""

    def init(self, params: torch.Tensor, context: ServerContext) -> NoState:
        return NoState()

    def aggregate(self, state, cohort, context):
        if len(cohort) == 0:
            return None, state, {}
        return cohort.pseudo_gradients.sum(dim=0) / context.num_clients, state, {}
