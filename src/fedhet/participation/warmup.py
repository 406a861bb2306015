"""FedAWARE's warm-up rounds (exploration sweep and full-participation startup round) for any process.

FedAWARE's server keeps a momentum per client and can only weigh clients it has seen, so the
authors' released code (``dunzeng/FedAWARE``, ``FeedbackSampler`` in ``mode.py``, used by
``fedaware.py``) first makes every client train once:

- **exploration sweep**: one random permutation of all N clients is drawn; each round hands out the
  next k clients not yet seen (the last sweep round gets the ``N mod k`` left over), so every client
  trains exactly once in the first ``ceil(N/k)`` rounds; only then does the regular sampler take over
  (and the server switch from plain weighted FedAvg steps to the FedAWARE step; fedhet's FedAWARE
  server does the same when ``explore`` is on, see :mod:`fedhet.algorithms.fedaware`, "Warm-up");
- **startup** (``-startup 1``): round 0 uses k = N, i.e. every client trains in round 0, which
  completes the sweep at once; the regular sampler starts in round 1.

The released code keeps the not-yet-seen clients in a Python ``set`` after the first round, so its
later sweep rounds take them in (effectively) ascending id order rather than permutation order;
fedhet takes them in permutation order, an unbiased random split of the clients into sweep rounds.

The fedhet rule, shared by every participation process (options ``explore`` and ``startup_round``):

- ``startup_round``: round 0 is every client; ``w = 1`` warm-up round.
- ``explore`` (without ``startup_round``): round ``r < w = ceil(N/k)`` is
  ``perm[r k : (r+1) k]`` (sorted), ``perm`` a permutation of the N clients drawn once per seed.
- both: round 0 is every client, which already sweeps everyone, so ``w = 1`` (as in the released code).
- ``k = clamp(round(sum_n p_n), 1, N)`` with ``p_n`` the process's own :meth:`probabilities`:
  ``clients_per_round`` for ``uniform``, ``round(ratio N)`` for ``bernoulli``, ``N`` for ``full``
  (a one-round sweep), ``round(sum_n p_n)`` (the expected number per round) for ``heterogeneous``.
- round ``t >= w`` is the process's own round ``t - w``: the process's pattern is the one it has
  without warm-up, delayed by ``w`` rounds (the sweep draws from its own random stream).

The wrapper's state is a :class:`WarmupState` holding the wrapped process's own state unchanged
(``inner``), so the wrapped process never sees the warm-up.
"""
from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple, Optional

import torch

from fedhet.core.options import ConfigError, option
from fedhet.participation.base import (
    ParticipationContext,
    ParticipationProcess,
    ParticipationState,
    Stream,
    participation_generator,
)


class WarmupState(NamedTuple):
    """State of :class:`WarmedUpProcess`: the wrapped process's state and the warm-up's shape.

    ``rounds`` is ``w``, the number of warm-up rounds; ``sweep_size`` the clients per sweep round
    (``N`` with ``startup_round``).
    """

    inner: ParticipationState   # the wrapped process's own typed state, unchanged
    rounds: int
    sweep_size: int


@dataclasses.dataclass(frozen=True)
class WarmupOptions:
    """Options every participation process has (base class of their option dataclasses)."""

    explore: bool = option(
        False,
        help="FedAWARE exploration sweep: sweep all clients without replacement in the first ceil(N/k) "
             "rounds before the process's own rule takes over; k is clients_per_round for uniform, "
             "else the process's expected number of clients per round, round(sum_n p_n)")
    startup_round: bool = option(
        False,
        help="FedAWARE startup round: round 0 has every client participate; the process's own rounds "
             "then start at round 1 (with explore, round 0 is the whole sweep)")


def sweep_size(probabilities: Optional[torch.Tensor], num_clients: int) -> int:
    """Clients per exploration round: ``clamp(round(sum_n p_n), 1, N)`` (expected number per round)."""
    if probabilities is None:
        raise ConfigError("participation.explore", True,
                          "needs a process with participation probabilities (its expected number of clients per "
                          "round sets the sweep size); this participation process has none (a trace whose "
                          "clients are all periodic, with clients_per_round = 0, has them)")
    expected = float(probabilities.double().sum())
    return max(1, min(num_clients, int(round(expected))))


class WarmedUpProcess:
    """A participation process preceded by FedAWARE's warm-up rounds (see the module docstring)."""

    def __init__(self, process: ParticipationProcess, options: WarmupOptions):
        if not (options.explore or options.startup_round):
            raise ValueError("WarmedUpProcess needs explore or startup_round; use with_warmup()")
        self.process = process
        self.explore = options.explore
        self.startup_round = options.startup_round

    def init(self, context: ParticipationContext) -> WarmupState:
        inner = self.process.init(context)
        num_clients = context.num_clients
        if self.startup_round:
            size, rounds = num_clients, 1
        else:
            size = sweep_size(self.process.probabilities(inner), num_clients)
            rounds = math.ceil(num_clients / size)
        return WarmupState(inner=inner, rounds=rounds, sweep_size=size)

    def sample(self, state: WarmupState, round_index: int,
               context: ParticipationContext) -> tuple[torch.Tensor, WarmupState]:
        warmup_rounds = int(state.rounds)
        if round_index < warmup_rounds:
            return self._sweep_round(state, round_index, context), state
        client_ids, inner = self.process.sample(state.inner, round_index - warmup_rounds, context)
        return client_ids, state._replace(inner=inner)

    def probabilities(self, state: WarmupState) -> Optional[torch.Tensor]:
        """The process's own p_n (the warm-up rounds are transient and not counted)."""
        return self.process.probabilities(state.inner)

    def explores(self) -> bool:
        """``explore`` (the startup round alone is no sweep: every client trains in round 0 anyway)."""
        return self.explore

    def _sweep_round(self, state: WarmupState, round_index: int,
                     context: ParticipationContext) -> torch.Tensor:
        num_clients = context.num_clients
        size = int(state.sweep_size)
        if size >= num_clients:
            return torch.arange(num_clients, dtype=torch.int64)
        # Regenerated each sweep round from a seed-keyed stream rather than stored in the state: a
        # permutation of N is cheap and the state stays O(1).
        order = torch.randperm(num_clients, generator=participation_generator(context.seed, Stream.SWEEP))
        chunk = order[round_index * size:(round_index + 1) * size]
        return torch.sort(chunk).values.to(torch.int64)


def with_warmup(process: ParticipationProcess, options: WarmupOptions) -> ParticipationProcess:
    """``process`` itself, or wrapped in :class:`WarmedUpProcess` when ``explore``/``startup_round`` is on.

    Every participation factory ends with ``return with_warmup(process, options)``.
    """
    if options.explore or options.startup_round:
        return WarmedUpProcess(process, options)
    return process
