"""Uniform participation: k of the N clients, without replacement, every round.

The sampling of FedAvg (McMahan et al. 2017), FedAWARE and FedSpeed: each round is an independent
uniformly random k-subset, so every client participates with probability ``k / N``.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch

from fedhet.core.options import ConfigError, option
from fedhet.core.registry import PARTICIPATION
from fedhet.participation.base import ParticipationContext, ParticipationProcess, Stream, participation_generator
from fedhet.participation.warmup import WarmupOptions, with_warmup


@dataclasses.dataclass(frozen=True)
class UniformOptions(WarmupOptions):
    """``[participation]`` options of ``uniform``."""

    clients_per_round: int = option(10, ge=1, symbol="k",
                                    help="clients drawn each round, without replacement (at most N)")


class UniformState(NamedTuple):
    """State of :class:`UniformParticipation`: only the population size (rounds are keyed by index)."""

    num_clients: int


class UniformParticipation:
    """k of N clients without replacement; round t's subset depends only on (seed, t)."""

    def __init__(self, options: UniformOptions):
        self.clients_per_round = options.clients_per_round

    def init(self, context: ParticipationContext) -> UniformState:
        if self.clients_per_round > context.num_clients:
            raise ConfigError("participation.clients_per_round", self.clients_per_round,
                              f"must be at most the number of clients N = {context.num_clients}")
        return UniformState(num_clients=context.num_clients)

    def sample(self, state: UniformState, round_index: int,
               context: ParticipationContext) -> tuple[torch.Tensor, UniformState]:
        generator = participation_generator(context.seed, Stream.UNIFORM, round_index)
        chosen = torch.randperm(context.num_clients, generator=generator)[:self.clients_per_round]
        return torch.sort(chosen).values.to(torch.int64), state

    def probabilities(self, state: UniformState) -> torch.Tensor:
        """``k / N`` for every client."""
        num_clients = int(state.num_clients)
        return torch.full((num_clients,), self.clients_per_round / num_clients, dtype=torch.float32)

    def explores(self) -> bool:
        return False          # no exploration sweep: with_warmup wraps the process when asked for one


@PARTICIPATION.register("uniform", UniformOptions)
def make_uniform(options: UniformOptions) -> ParticipationProcess:
    """k of N clients each round, uniformly without replacement (FedAvg, FedAWARE, FedSpeed)."""
    return with_warmup(UniformParticipation(options), options)
