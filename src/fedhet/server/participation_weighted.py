"""FedAU and the participation-aware aggregation baselines of the FedAU paper.

Wang and Ji, "A Lightweight Method for Tackling Unknown Participation Statistics in Federated
Averaging" (FedAU, ICLR 2024). Algorithm 1 (FedAvg with pluggable aggregation weights, un-normalised)::

    x <- x + (eta_g / N) sum_{n in S} omega_n delta_n,     i.e.   G = (1/N) sum_{n in S} omega_n g_n,  x <- x - eta_g G

with ``delta_n = y_n - x`` and ``g_n = -delta_n`` (docs/algorithms.md sections 1 and 4). The weights:

- ``fedau``: ``omega_n`` from client n's own participation history in rounds ``< t`` (Algorithm 2,
  :mod:`fedhet.server.fedau_weights`), with cutoff ``K``;
- ``average_participating``: ``G = (1/|S|) sum_S g_n`` (``omega_n = N / |S|``);
- ``average_all``: ``G = (1/N) sum_S g_n`` (``omega_n = 1``; absent clients count as zero updates);
- ``known_participation``: ``G = (1/N) sum_S g_n / p_n`` (``omega_n = 1/p_n``, the idealised
  baseline that knows each client's participation probability ``p_n``).

A round with no participant takes no step; FedAU's weight state still advances (a round without
client n is part of n's participation interval).

Rule table server:
    | FedAU and participation-aware weights | see section 4 | |
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional

import torch

from fedhet.core.options import option
from fedhet.core.cohort import Cohort
from fedhet.core.registry import SERVERS
from fedhet.server.base import NoState, ServerContext, ServerOptions, ServerSGD
from fedhet.server.methods import server_method
from fedhet.server.fedau_weights import fedau_state_init, fedau_state_step


@dataclasses.dataclass(frozen=True)
class FedAUOptions(ServerOptions):
    """``[server]`` options of ``fedau`` (FedAU paper, Algorithm 2)."""

    cutoff: Optional[int] = option(50, ge=1, symbol="K",
                                   help="longest participation interval counted by the weight estimate "
                                        "(the paper recommends 50); none = K infinity, no cutoff")


def _weighted_sum_over_all(cohort: Cohort, weights: torch.Tensor, num_clients: int) -> torch.Tensor:
    """``(1/N) sum_{n in S} omega_n g_n`` with ``weights`` the float64 ``omega_n`` of the cohort's rows."""
    coefficients = (weights / num_clients).to(device=cohort.deltas.device, dtype=cohort.deltas.dtype)
    return coefficients @ cohort.pseudo_gradients


class FedAUState(NamedTuple):
    """:class:`FedAUAggregation`'s state: Algorithm 2's per-client scalars (the dict of
    :func:`fedhet.server.fedau_weights.fedau_state_init`) and the next round it expects."""

    weights: dict[str, torch.Tensor]
    next_round: int


class FedAUAggregation:
    """``G = (1/N) sum_S omega_n g_n`` with FedAU's online weights (Algorithms 1 and 2).

    State: Algorithm 2's per-client scalars (``intervals_collected`` M_n, ``open_interval`` S'_n,
    ``omega``) and ``next_round``. ``omega`` always holds the weights of the *next* round to be
    aggregated: round t uses it and then advances it with round t's participation, so the weight
    used in round t depends on rounds ``< t`` only. The state advances in every round, empty ones
    included, so the server must see every round in order (checked).
    """

    def __init__(self, cutoff: Optional[int]):
        self.cutoff = cutoff

    def init(self, params: torch.Tensor, context: ServerContext) -> FedAUState:
        return FedAUState(weights=fedau_state_init(context.num_clients, device=params.device), next_round=0)

    def aggregate(self, state: FedAUState, cohort: Cohort, context: ServerContext):
        if context.round_index != state.next_round:
            raise ValueError(f"FedAU's weights follow every round in order: the server state expects round "
                             f"{state.next_round} but was called for round {context.round_index}")
        weight_state = state.weights
        omega = weight_state["omega"]
        ids = cohort.client_ids.to(omega.device)
        participated = torch.zeros(context.num_clients, dtype=torch.bool, device=omega.device)
        participated[ids] = True
        _, next_weight_state = fedau_state_step(weight_state, participated, self.cutoff)
        new_state = FedAUState(weights=next_weight_state, next_round=state.next_round + 1)
        if len(cohort) == 0:
            return None, new_state, {}
        weights = omega[ids]
        metrics = {"fedau_weight_mean": float(weights.mean()), "fedau_weight_max": float(weights.max())}
        return _weighted_sum_over_all(cohort, weights, context.num_clients), new_state, metrics


class AverageParticipating:
    """``G = (1/|S|) sum_S g_n``: the plain mean of the participants' updates. No state."""

    def init(self, params: torch.Tensor, context: ServerContext) -> NoState:
        return NoState()

    def aggregate(self, state, cohort, context):
        if len(cohort) == 0:
            return None, state, {}
        return cohort.pseudo_gradients.mean(dim=0), state, {}


class AverageAll:
    """``G = (1/N) sum_S g_n``: the sum of the participants' updates over all N clients. No state."""

    def init(self, params: torch.Tensor, context: ServerContext) -> NoState:
        return NoState()

    def aggregate(self, state, cohort, context):
        if len(cohort) == 0:
            return None, state, {}
        return cohort.pseudo_gradients.sum(dim=0) / context.num_clients, state, {}


def known_probabilities(context: ServerContext) -> torch.Tensor:
    """The participation process's ``p_n`` (float64 ``[N]``), or a clear error when it has none."""
    probabilities = context.participation_probabilities
    if probabilities is None:
        raise ValueError("server known_participation weighs each update by 1/p_n, but the configured "
                         "participation process (participation.name) defines no participation "
                         "probabilities p_n; use a process that does (e.g. uniform, bernoulli, full, "
                         "heterogeneous) or another server")
    probabilities = probabilities.to(torch.float64)
    if probabilities.shape != (context.num_clients,):
        raise ValueError(f"participation probabilities must have shape ({context.num_clients},), "
                         f"got {tuple(probabilities.shape)}")
    return probabilities


class KnownParticipation:
    """``G = (1/N) sum_S g_n / p_n`` with the process's known ``p_n``. No state."""

    def init(self, params: torch.Tensor, context: ServerContext) -> NoState:
        known_probabilities(context)     # fail at start, not at the first aggregation
        return NoState()

    def aggregate(self, state, cohort, context):
        if len(cohort) == 0:
            return None, state, {}
        probabilities = known_probabilities(context)
        selected = probabilities[cohort.client_ids.to(probabilities.device)]
        if bool((selected <= 0).any()):
            offending = cohort.client_ids[(selected <= 0).cpu()].tolist()
            raise ValueError(f"clients {offending} participated but their known participation probability "
                             f"p_n is 0; 1/p_n is undefined")
        weights = 1.0 / selected
        return _weighted_sum_over_all(cohort, weights, context.num_clients), state, {
            "known_weight_mean": float(weights.mean()), "known_weight_max": float(weights.max())}


@SERVERS.register("fedau", FedAUOptions)
def make_fedau(options: FedAUOptions):
    """FedAU: x <- x + (eta_g/N) sum_S omega_n delta_n, omega_n from n's participation intervals (Wang & Ji 2024)."""
    return server_method(FedAUAggregation(options.cutoff), ServerSGD(options.learning_rate), options)


@SERVERS.register("average_participating", ServerOptions)
def make_average_participating(options: ServerOptions):
    """Average participating: x <- x + (eta_g/|S|) sum_S delta_n (FedAU paper's baseline)."""
    return server_method(AverageParticipating(), ServerSGD(options.learning_rate), options)


@SERVERS.register("average_all", ServerOptions)
def make_average_all(options: ServerOptions):
    """Average all: x <- x + (eta_g/N) sum_S delta_n (FedAU paper's baseline)."""
    return server_method(AverageAll(), ServerSGD(options.learning_rate), options)


@SERVERS.register("known_participation", ServerOptions)
def make_known_participation(options: ServerOptions):
    """Known participation statistics: x <- x + (eta_g/N) sum_S delta_n / p_n (FedAU paper's baseline)."""
    return server_method(KnownParticipation(), ServerSGD(options.learning_rate), options)
