"""The participation stage: which clients train in round t.

A process is an immutable object (its options) with explicit state::

    state = process.init(context)
    client_ids, state = process.sample(state, round_index, context)

``client_ids`` is a sorted 1-D int64 tensor (possibly empty for processes that allow empty rounds).
All randomness comes from ``fedhet.core.seeding.torch_generator(context.seed, "participation", ...)``
keyed by the round (and client where useful), so resuming from a checkpointed state at round t
reproduces the uninterrupted run.

``state`` is a typed state, a ``NamedTuple`` of the process's own type (``UniformState``,
``MarkovState``, ``WarmupState`` wrapping the inner process's state, ...; docs/design.md, "State")
whose fields are tensors, numbers, strings or other typed states. ``sample`` never mutates the state
it is given: it returns it unchanged or a new one (``state._replace(...)``). Checkpoints write the
state as the dict of its fields and rebuild it from a freshly initialised state
(:mod:`fedhet.engine.checkpoint`), so a process must return a state of the same type and fields
from ``init`` on every run with the same options.
"""
from __future__ import annotations

import dataclasses
import enum
from typing import Any, Optional, Protocol

import torch

from fedhet.core.seeding import torch_generator


@dataclasses.dataclass(frozen=True)
class ParticipationContext:
    """What a participation process may know about the federation."""

    num_clients: int
    seed: int
    client_label_counts: torch.Tensor     # [N, C] int64, examples per client and class
    # Virtual seconds at the start of the round when the run has a virtual clock ([system] section,
    # fedhet.engine.clock), else None; the ``trace`` process reads it.
    virtual_seconds: Optional[float] = None


# The state of a participation process: a NamedTuple of the process's own type (module docstring).
ParticipationState = Any


class ParticipationProcess(Protocol):
    def init(self, context: ParticipationContext) -> ParticipationState:
        """The state before round 0."""
        ...

    def sample(self, state: ParticipationState, round_index: int,
               context: ParticipationContext) -> tuple[torch.Tensor, ParticipationState]:
        """``(client_ids, new_state)`` for round ``round_index``; ``state`` is left unchanged."""
        ...

    def probabilities(self, state: ParticipationState) -> Optional[torch.Tensor]:
        """Per-client participation probabilities p_n when the process defines them (else None).

        A float32 ``[N]`` tensor: the rate of the process's own rule (FedAWARE warm-up rounds are
        not counted), as used by the "known participation statistics" baseline.
        """
        ...

    def explores(self) -> bool:
        """Whether the first rounds are FedAWARE's exploration sweep (``participation.explore``,
        :mod:`fedhet.participation.warmup`). The server learns it as
        ``ServerContext.participation_explore``: FedAWARE steps like FedAvg, and AWARE leaves the
        method's step unchanged, until every client has trained once. Constant for a process."""
        ...


class Stream(enum.IntEnum):
    """Independent random streams of the participation stage.

    Each is the first index of the seeding key, so two draws never share a stream: turning on the
    exploration sweep, for example, leaves every later round of the wrapped process unchanged.
    The values are part of the reproducibility contract (changing one changes every run).
    """

    SWEEP = 1                      # FedAWARE exploration sweep: one permutation of all clients
    UNIFORM = 2                    # uniform k-of-N, keyed by round
    BERNOULLI = 3                  # common-ratio Bernoulli, keyed by round
    FEDAU_PROBABILITIES = 4        # q ~ Dir(alpha_p 1_C), one draw per seed
    HETEROGENEOUS_BERNOULLI = 5    # per-client Bernoulli(p_n), keyed by round
    MARKOV_INITIAL = 6             # initial on/off state of the Markov chains
    MARKOV = 7                     # Markov transitions, keyed by round
    CYCLIC_OFFSET = 8              # random initial offsets of the cyclic pattern
    TRACE = 9                      # k of the clients a trace has on, keyed by round


def participation_generator(seed: int, stream: Stream, *indices: int) -> torch.Generator:
    """The generator for one draw: ``torch_generator(seed, "participation", stream, *indices)``.

    Key every per-round draw by the round index so a resumed run draws exactly what an uninterrupted
    one draws.
    """
    return torch_generator(seed, "participation", int(stream), *indices)


def ids_from_mask(mask: torch.Tensor) -> torch.Tensor:
    """Sorted int64 ids of the ``True`` entries of a ``[N]`` bool mask."""
    return torch.nonzero(mask, as_tuple=False).flatten().to(torch.int64)
