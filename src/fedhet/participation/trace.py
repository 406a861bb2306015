"""Trace-driven availability: client n can be chosen only inside its on-intervals (docs/system.md).

The trace (:mod:`fedhet.core.traces`: fedhet's JSON/CSV schema or the Plato-style text form) says
when each client is on, in virtual seconds. Round t starts at the virtual clock's time ``tau_t``
(``ParticipationContext.virtual_seconds``, set by :mod:`fedhet.engine.clock`); the clients on at
``tau_t`` are the available set ``A_t``. The round's cohort is all of ``A_t`` when
``clients_per_round`` is 0 or ``|A_t| <= k``, else k of ``A_t`` uniformly without replacement from
a stream keyed by (seed, round). An empty ``A_t`` is an empty round (the clock then waits
``system.idle_seconds``). A run with ``participation.name = "trace"`` needs a ``[system]`` section.

The trace is read and checked when the configuration is (a malformed file, a negative time or an
empty window is refused before any work) and against ``partition.num_clients`` when the process
starts; the state holds the trace itself, so a checkpoint carries it, and a resumed run takes it from
there without reading the file again.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional

import torch

from fedhet.core.options import ConfigError, option
from fedhet.core.registry import PARTICIPATION
from fedhet.core.resume_inputs import from_checkpoint, saved_state
from fedhet.core.traces import available_at, read_trace
from fedhet.participation.base import (
    ParticipationContext,
    ParticipationProcess,
    Stream,
    ids_from_mask,
    participation_generator,
)
from fedhet.participation.warmup import WarmupOptions, with_warmup


@dataclasses.dataclass(frozen=True)
class TraceOptions(WarmupOptions):
    """``[participation]`` options of ``trace``."""

    trace_file: str = option("", help="availability trace: .json or .csv (fedhet's schema) or .txt (Plato-style); "
                                      "docs/system.md, \"Traces\"")
    clients_per_round: int = option(0, ge=0, symbol="k",
                                    help="clients drawn among the available ones each round; 0 = every "
                                         "available client")

    def validate(self, section: str) -> None:
        if not self.trace_file:
            raise ConfigError(f"{section}.trace_file", self.trace_file, "participation 'trace' needs a trace file")
        if not from_checkpoint():          # a resumed run's trace is its checkpoint's (fedhet.core.resume_inputs)
            read_trace(self.trace_file)    # a bad trace is refused with the configuration


class TraceState(NamedTuple):
    """The trace as flat tensors (:meth:`fedhet.core.traces.AvailabilityTrace.to_tensors`)."""

    owner: torch.Tensor     # [M] int64, client of each on-interval
    start: torch.Tensor     # [M] float64
    end: torch.Tensor       # [M] float64
    period: torch.Tensor    # [N] float64, inf for a client whose trace is not replayed


class TraceParticipation:
    """Clients on at the round's virtual start time (all of them, or k of them)."""

    def __init__(self, options: TraceOptions):
        self.trace_file = options.trace_file
        self.clients_per_round = options.clients_per_round

    def init(self, context: ParticipationContext) -> TraceState:
        saved = saved_state("participation", TraceState._fields)
        if saved is not None:
            # Resuming: the checkpoint holds the trace the run started with; the file, which may have
            # changed or gone since, is not read again (fedhet.core.resume_inputs).
            return TraceState(**saved)
        trace = read_trace(self.trace_file)
        if trace.num_clients != context.num_clients:
            raise ConfigError("participation.trace_file", self.trace_file,
                              f"lists {trace.num_clients} clients but the partition has {context.num_clients}")
        return TraceState(**trace.to_tensors())

    def available(self, state: TraceState, seconds: float) -> torch.Tensor:
        return available_at(state.owner, state.start, state.end, state.period, seconds)

    def sample(self, state: TraceState, round_index: int,
               context: ParticipationContext) -> tuple[torch.Tensor, TraceState]:
        if context.virtual_seconds is None:
            raise ConfigError("participation.name", "trace", "needs the virtual clock: add a [system] section "
                                                             "(docs/system.md)")
        on = ids_from_mask(self.available(state, context.virtual_seconds))
        k = self.clients_per_round
        if k == 0 or on.numel() <= k:
            return on, state
        generator = participation_generator(context.seed, Stream.TRACE, round_index)
        chosen = on[torch.randperm(int(on.numel()), generator=generator)[:k]]
        return torch.sort(chosen).values, state

    def probabilities(self, state: TraceState) -> Optional[torch.Tensor]:
        """The share of time each client is on, when every client's trace is periodic and every
        available client is chosen (``clients_per_round = 0``); else None (not defined in closed form)."""
        if self.clients_per_round != 0 or bool(torch.isinf(state.period).any()):
            return None
        on_time = torch.zeros_like(state.period).index_add_(0, state.owner, state.end - state.start)
        return (on_time / state.period).clamp(max=1.0).to(torch.float32)

    def explores(self) -> bool:
        return False          # no exploration sweep: with_warmup wraps the process when asked for one


@PARTICIPATION.register("trace", TraceOptions)
def make_trace(options: TraceOptions) -> ParticipationProcess:
    """Clients available at the round's virtual time in an availability trace (needs [system])."""
    return with_warmup(TraceParticipation(options), options)
