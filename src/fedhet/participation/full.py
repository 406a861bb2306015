"""Full participation: every client trains in every round."""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch

from fedhet.core.registry import PARTICIPATION
from fedhet.participation.base import ParticipationContext, ParticipationProcess
from fedhet.participation.warmup import WarmupOptions, with_warmup


@dataclasses.dataclass(frozen=True)
class FullOptions(WarmupOptions):
    """``[participation]`` options of ``full`` (only the shared warm-up options, which change nothing
    here since every round is already everyone)."""


class FullState(NamedTuple):
    """State of :class:`FullParticipation`: only the population size."""

    num_clients: int


class FullParticipation:
    """All N clients every round; ``p_n = 1``."""

    def init(self, context: ParticipationContext) -> FullState:
        return FullState(num_clients=context.num_clients)

    def sample(self, state: FullState, round_index: int,
               context: ParticipationContext) -> tuple[torch.Tensor, FullState]:
        return torch.arange(context.num_clients, dtype=torch.int64), state

    def probabilities(self, state: FullState) -> torch.Tensor:
        return torch.ones(int(state.num_clients), dtype=torch.float32)

    def explores(self) -> bool:
        return False          # no exploration sweep: with_warmup wraps the process when asked for one


@PARTICIPATION.register("full", FullOptions)
def make_full(options: FullOptions) -> ParticipationProcess:
    """Every client in every round."""
    return with_warmup(FullParticipation(), options)
