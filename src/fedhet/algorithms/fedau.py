"""FedAU (Wang, Ji, ICLR 2024)

"A Lightweight Method for Tackling Unknown Participation Statistics in Federated Averaging", and
the baselines the paper defines on the same update form. Algorithm 1 (FedAvg with pluggable
aggregation weights, un-normalised)::

    x <- x + (eta_g / N) sum_{n in S} omega_n delta_n,     i.e.   G = (1/N) sum_{n in S} omega_n g_n,  x <- x - eta_g G

with ``delta_n = y_n - x`` and ``g_n = -delta_n`` (docs/algorithms.md sections 1 and 4). The weights:

- ``fedau``: ``omega_n`` from client n's own participation history in rounds ``< t`` (Algorithm 2,
  below), with cutoff ``K``;
- ``average_participating``: ``G = (1/|S|) sum_S g_n`` (``omega_n = N / |S|``);
- ``average_all``: ``G = (1/N) sum_S g_n`` (``omega_n = 1``; absent clients count as zero updates);
- ``known_participation``: ``G = (1/N) sum_S g_n / p_n`` (``omega_n = 1/p_n``, the idealised
  baseline that knows each client's participation probability ``p_n``).

The two plain averages are shared aggregators (:mod:`fedhet.server.averaging`; SCAFFOLD and FedADMM
step with them too). A round with no participant takes no step; FedAU's weight state still advances
(a round without client n is part of n's participation interval).

The weights, Algorithm 2 (:func:`fedau_weights`, :func:`fedau_state_step`), for client ``n`` with
cutoff ``K`` (docs/algorithms.md section 4)::

    M_n <- 0;  S'_n <- 0;  omega_0 <- 1
    for t = 1, ..., T-1:
        S'_n <- S'_n + 1
        if client n participated in round t-1  or  S'_n == K:      # close the open interval
            S_n <- S'_n
            omega_t <- S_n                           if M_n == 0
                       (M_n omega_{t-1} + S_n) / (M_n + 1)   otherwise
            M_n <- M_n + 1;  S'_n <- 0
        else:
            omega_t <- omega_{t-1}

``omega_t`` is the running mean of the (possibly cut-off) participation intervals closed so far;
it uses rounds ``< t`` only (Algorithm 1 needs ``omega_t`` independent of round ``t``'s
participation). ``K = None`` means ``K = infinity`` (intervals are closed by participations only).
The weight is defined for every client and round; the aggregation uses it for participants.

Weight at a client's first participation (docs/algorithms.md section 4, "first participation
weight 1"). It is 1 exactly when no interval was closed before that round:

- ``K = infinity``: always. Intervals close only the round after a participation, so for a first
  participation in round ``t0`` (``t0 = 0`` included) ``omega`` stays at ``omega_0 = 1`` through
  round ``t0``; the stretch ``0..t0`` then becomes the first interval (length ``t0 + 1``, used
  from round ``t0 + 1`` on), as the paper's Section 3 ("Technical Challenge") describes the
  first interval as starting "right before the first round t = 0".
- finite ``K``: when ``t0 < K``. If the client stays away for ``t0 >= K`` rounds, Algorithm 2
  line "S'_n == K" closes cut-off intervals of length ``K`` in rounds ``K, 2K, ...``, and the
  weight at the first participation is ``K``, not 1.

The authors' released code (IBM/fedau, ``main.py``) keeps, per client, a counter of rounds without
participation and a list of intervals: on participation it uses the mean of the list (or leaves
the update unscaled, i.e. weight 1, when the list is empty) and then appends ``counter + 1``; on
non-participation it increments the counter and appends it when it reaches ``K``. Its intervals
are closed one round-processing earlier than Algorithm 2's but enter the mean for exactly the same
rounds, so its weights equal Algorithm 2's at every participation, including the weight ``K`` of a
late first participation with a finite cutoff. fedhet therefore implements Algorithm 2 literally;
the tests compare it with both transcriptions.

Rule table server:
    | FedAU and participation-aware weights | see section 4 | |
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional

import torch

from fedhet.core.cohort import Cohort
from fedhet.core.options import ConfigError, option
from fedhet.core.registry import SERVERS
from fedhet.server.averaging import AverageAllAggregator, AverageParticipatingAggregator
from fedhet.server.base import NoState, ServerContext, ServerOptions, SGDOptimizer
from fedhet.server.methods import server_method


@dataclasses.dataclass(frozen=True)
class FedAUOptions(ServerOptions):
    """``[server]`` options of ``fedau`` (FedAU paper, Algorithm 2)."""

    cutoff: Optional[int] = option(50, ge=1, symbol="K",
                                   help="longest participation interval counted by the weight estimate "
                                        "(the paper recommends 50); none = K infinity, no cutoff")


# --- Algorithm 2: the weights ----------------------------------------------------------------------

_STATE_KEYS = ("intervals_collected", "open_interval", "omega")


def fedau_state_init(num_clients: int, *, device: torch.device | str | None = None) -> dict[str, torch.Tensor]:
    """Algorithm 2's initial state for ``num_clients`` clients.

    Keys: ``intervals_collected`` (int64 ``[N]``, ``M_n``), ``open_interval`` (int64 ``[N]``,
    ``S'_n``), ``omega`` (float64 ``[N]``, the current weights; all 1 = ``omega_0``, the weights of
    round 0). Tensors only, so the state can be checkpointed with ``torch.save``.
    """
    if not isinstance(num_clients, int) or isinstance(num_clients, bool) or num_clients < 0:
        raise ValueError(f"fedau_state_init: num_clients must be an int >= 0, got {num_clients!r}")
    return {
        "intervals_collected": torch.zeros(num_clients, dtype=torch.int64, device=device),
        "open_interval": torch.zeros(num_clients, dtype=torch.int64, device=device),
        "omega": torch.ones(num_clients, dtype=torch.float64, device=device),
    }


def fedau_state_step(state: dict[str, torch.Tensor], participated_last_round: torch.Tensor,
                     cutoff: Optional[int] = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One iteration ``t >= 1`` of Algorithm 2 for all clients at once.

    ``participated_last_round``: bool ``[N]``, ``I_{t-1}``. Returns ``(omega_t, new_state)``; the
    input state is not modified. Round 0 has no step: its weights are ``state["omega"]`` of
    :func:`fedau_state_init` (all 1). Iterating this from the initial state with the rows
    ``0, 1, ..., T-2`` of a participation matrix gives rows ``1, ..., T-1`` of :func:`fedau_weights`.
    """
    _check_cutoff(cutoff, "fedau_state_step")
    _check_state(state)
    num_clients = state["omega"].shape[0]
    if not isinstance(participated_last_round, torch.Tensor):
        raise ValueError("fedau_state_step: participated_last_round must be a torch.bool tensor, "
                         f"got {type(participated_last_round).__name__}")
    if participated_last_round.dtype != torch.bool:
        raise ValueError("fedau_state_step: participated_last_round must be a torch.bool tensor, "
                         f"got dtype {participated_last_round.dtype}")
    if participated_last_round.shape != (num_clients,):
        raise ValueError(f"fedau_state_step: participated_last_round must have shape ({num_clients},) "
                         f"to match the state, got {tuple(participated_last_round.shape)}")
    participated = participated_last_round.to(state["omega"].device)
    collected = state["intervals_collected"]
    omega = state["omega"]

    open_interval = state["open_interval"] + 1
    close = participated if cutoff is None else participated | (open_interval == cutoff)
    interval = open_interval.to(torch.float64)
    running_mean = (collected.to(torch.float64) * omega + interval) / (collected + 1).to(torch.float64)
    closed_omega = torch.where(collected == 0, interval, running_mean)
    new_omega = torch.where(close, closed_omega, omega)
    new_state = {
        "intervals_collected": collected + close.to(torch.int64),
        "open_interval": torch.where(close, torch.zeros_like(open_interval), open_interval),
        "omega": new_omega,
    }
    return new_omega.clone(), new_state


def fedau_weights(participation: torch.Tensor, *, cutoff: Optional[int] = None) -> torch.Tensor:
    """FedAU weights ``omega[t, n]`` (float64 ``[T, N]``) for a bool participation matrix ``[T, N]``
    (round x client), by Algorithm 2 with cutoff ``K = cutoff`` (``None``: ``K = infinity``).

    Row 0 is all ones; row ``t`` depends on rows ``< t`` only, so the last row of
    ``participation`` does not affect the result.
    """
    _check_cutoff(cutoff, "fedau_weights")
    if not isinstance(participation, torch.Tensor):
        raise ValueError("fedau_weights: participation must be a torch.bool tensor [T, N], "
                         f"got {type(participation).__name__}")
    if participation.dtype != torch.bool:
        raise ValueError("fedau_weights: participation must have dtype torch.bool (round x client), "
                         f"got {participation.dtype}")
    if participation.ndim != 2:
        raise ValueError("fedau_weights: participation must be 2-D [T rounds, N clients], "
                         f"got shape {tuple(participation.shape)}")
    num_rounds, num_clients = participation.shape
    weights = torch.empty(num_rounds, num_clients, dtype=torch.float64, device=participation.device)
    if num_rounds == 0:
        return weights
    state = fedau_state_init(num_clients, device=participation.device)
    weights[0] = state["omega"]
    for t in range(1, num_rounds):
        weights[t], state = fedau_state_step(state, participation[t - 1], cutoff)
    return weights


def _check_cutoff(cutoff: Optional[int], where: str) -> None:
    if cutoff is None:
        return
    if not isinstance(cutoff, int) or isinstance(cutoff, bool) or cutoff < 1:
        raise ValueError(f"{where}: cutoff must be None (K = infinity) or an int >= 1, got {cutoff!r}")


def _check_state(state: dict[str, torch.Tensor]) -> None:
    if not isinstance(state, dict) or set(state) != set(_STATE_KEYS):
        keys = sorted(state) if isinstance(state, dict) else type(state).__name__
        raise ValueError(f"fedau_state_step: state must be a dict with keys {list(_STATE_KEYS)} "
                         f"(from fedau_state_init), got {keys}")
    shapes = {key: tuple(state[key].shape) for key in _STATE_KEYS}
    if len(set(shapes.values())) != 1 or len(shapes["omega"]) != 1:
        raise ValueError(f"fedau_state_step: state tensors must all have shape [N], got {shapes}")


# --- aggregation ----------------------------------------------------------------------------------

def _weighted_sum_over_all(cohort: Cohort, weights: torch.Tensor, num_clients: int) -> torch.Tensor:
    """``(1/N) sum_{n in S} omega_n g_n`` with ``weights`` the float64 ``omega_n`` of the cohort's rows."""
    coefficients = (weights / num_clients).to(device=cohort.deltas.device, dtype=cohort.deltas.dtype)
    return coefficients @ cohort.pseudo_gradients


class FedAUState(NamedTuple):
    """:class:`FedAUAggregator`'s state: Algorithm 2's per-client scalars (the dict of
    :func:`fedau_state_init`) and the next round it expects."""

    weights: dict[str, torch.Tensor]
    next_round: int


class FedAUAggregator:
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


def known_probabilities(context: ServerContext) -> torch.Tensor:
    """The participation process's ``p_n`` (float64 ``[N]``), or a clear error when it has none."""
    probabilities = context.participation_probabilities
    if probabilities is None:
        raise ConfigError("server.name", "known_participation",
                          "weighs each update by 1/p_n, but the configured participation process "
                          "(participation.name) defines no participation probabilities p_n; use a process that "
                          "does (e.g. uniform, bernoulli, full, heterogeneous, or trace with every client's "
                          "trace periodic and clients_per_round = 0) or another server")
    probabilities = probabilities.to(torch.float64)
    if probabilities.shape != (context.num_clients,):
        raise ValueError(f"participation probabilities must have shape ({context.num_clients},), "
                         f"got {tuple(probabilities.shape)}")
    return probabilities


class KnownParticipationAggregator:
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


@SERVERS.register("fedau", FedAUOptions, gradient_step=True)
def make_fedau(options: FedAUOptions):
    """FedAU: x <- x + (eta_g/N) sum_S omega_n delta_n, omega_n from n's participation intervals (Wang & Ji 2024)."""
    return server_method(FedAUAggregator(options.cutoff), SGDOptimizer(options.learning_rate), options)


@SERVERS.register("average_participating", ServerOptions, gradient_step=True)
def make_average_participating(options: ServerOptions):
    """Average participating: x <- x + (eta_g/|S|) sum_S delta_n (FedAU paper's baseline)."""
    return server_method(AverageParticipatingAggregator(), SGDOptimizer(options.learning_rate), options)


@SERVERS.register("average_all", ServerOptions, gradient_step=True)
def make_average_all(options: ServerOptions):
    """Average all: x <- x + (eta_g/N) sum_S delta_n (FedAU paper's baseline)."""
    return server_method(AverageAllAggregator(), SGDOptimizer(options.learning_rate), options)


@SERVERS.register("known_participation", ServerOptions, gradient_step=True)
def make_known_participation(options: ServerOptions):
    """Known participation statistics: x <- x + (eta_g/N) sum_S delta_n / p_n (FedAU paper's baseline)."""
    return server_method(KnownParticipationAggregator(), SGDOptimizer(options.learning_rate), options)
