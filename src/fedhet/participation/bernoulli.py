"""Bernoulli participation with a common ratio, redrawn when nobody was drawn.

Each client joins round t independently with probability ``ratio``; a round in which nobody joined
is redrawn (whole round, same rule) until someone did, as in the FedSpeed authors' code, so rounds
are never empty. The redraw conditions on a non-empty round and so raises the effective rate to

    P(n in S_t) = ratio / (1 - (1 - ratio)^N)

(e.g. 0.1535 instead of 0.1 for N = 10; within 3e-6 of ``ratio`` for N = 100, ratio = 0.1).
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch

from fedhet.core.options import option
from fedhet.core.registry import PARTICIPATION
from fedhet.participation.base import (
    ParticipationContext,
    ParticipationProcess,
    Stream,
    ids_from_mask,
    participation_generator,
)
from fedhet.participation.warmup import WarmupOptions, with_warmup


@dataclasses.dataclass(frozen=True)
class BernoulliOptions(WarmupOptions):
    """``[participation]`` options of ``bernoulli``."""

    ratio: float = option(0.1, gt=0, le=1, help="probability that a client joins a round, the same for all "
                                               "clients (an empty round is redrawn)")


def effective_bernoulli_rate(ratio: float, num_clients: int) -> float:
    """``ratio / (1 - (1 - ratio)^N)``: the per-client rate once empty rounds are redrawn."""
    return ratio / (1.0 - (1.0 - ratio) ** num_clients)


class BernoulliState(NamedTuple):
    """State of :class:`BernoulliParticipation`: only the population size (rounds are keyed by index)."""

    num_clients: int


class BernoulliParticipation:
    """Independent Bernoulli(ratio) per client and round; an empty round is redrawn."""

    def __init__(self, options: BernoulliOptions):
        self.ratio = options.ratio

    def init(self, context: ParticipationContext) -> BernoulliState:
        return BernoulliState(num_clients=context.num_clients)

    def sample(self, state: BernoulliState, round_index: int,
               context: ParticipationContext) -> tuple[torch.Tensor, BernoulliState]:
        # Redraws continue the round's own stream, so they are as reproducible as the first draw.
        generator = participation_generator(context.seed, Stream.BERNOULLI, round_index)
        while True:
            mask = torch.rand(context.num_clients, generator=generator, dtype=torch.float64) < self.ratio
            if bool(mask.any()):
                return ids_from_mask(mask), state

    def probabilities(self, state: BernoulliState) -> torch.Tensor:
        """``ratio`` for every client (the nominal rate; the redraw raises the realised one to
        :func:`effective_bernoulli_rate`)."""
        return torch.full((int(state.num_clients),), self.ratio, dtype=torch.float32)

    def explores(self) -> bool:
        return False          # no exploration sweep: with_warmup wraps the process when asked for one


@PARTICIPATION.register("bernoulli", BernoulliOptions)
def make_bernoulli(options: BernoulliOptions) -> ParticipationProcess:
    """Each client independently with a common ratio; an empty round is redrawn (FedSpeed code)."""
    return with_warmup(BernoulliParticipation(options), options)
