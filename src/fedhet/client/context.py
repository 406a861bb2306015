"""Who trains, in which round, and their random stream: what :meth:`LocalSolver.begin` is handed.

A solver that draws random numbers (noise, stochastic quantisation, a random mask) must draw them
from the client's own stream, keyed like every other stream of fedhet
(:func:`fedhet.core.seeding.derive_seed`: ``(run seed, "solver", round index, client id)``), so that
a run gives the same numbers on every backend and after a resume. The sequential backend trains one
client at a time (tensors of shape ``[d]``); the vectorised one trains a cohort at once (``[K, d]``).
:meth:`ClientContext.randn` and :meth:`ClientContext.rand` hide the difference: each row is drawn
from its client's generator, so both backends draw the same numbers for client ``i``.

The generators are made on first use: a solver that draws nothing creates none, so the context
costs it nothing and changes none of its numbers.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect

import torch

from fedhet.core.seeding import torch_generator

SOLVER_STREAM = "solver"
"""The purpose key of the solvers' random streams (``derive_seed(seed, "solver", round, client)``)."""


@dataclasses.dataclass(eq=False)
class ClientContext:
    """The round (0-based ``round_index``), the training clients and their seeded generators.

    ``cohort`` is False when the solver's tensors are one client's (``[d]``, the sequential
    backend; ``client_ids`` then has one entry) and True when they hold a row per client of
    ``client_ids`` (``[K, d]``, the vectorised backend).
    """

    round_index: int
    client_ids: tuple[int, ...]
    seed: int
    cohort: bool
    device: torch.device = dataclasses.field(default_factory=lambda: torch.device("cpu"))
    _generators: tuple[torch.Generator, ...] | None = dataclasses.field(default=None, repr=False)

    @property
    def client_id(self) -> int:
        """The one training client (sequential backend); a cohort has :attr:`client_ids` instead."""
        if len(self.client_ids) != 1:
            raise ValueError(f"this context holds {len(self.client_ids)} clients; use client_ids, generators, "
                             "or randn/rand, which draw one row per client")
        return self.client_ids[0]

    @property
    def generators(self) -> tuple[torch.Generator, ...]:
        """One ``torch.Generator`` per client of :attr:`client_ids` (on :attr:`device`), seeded by
        ``derive_seed(seed, "solver", round_index, client_id)``; made on first use, then kept, so
        draws in ``begin`` and in later steps continue one stream."""
        if self._generators is None:
            self._generators = tuple(torch_generator(self.seed, SOLVER_STREAM, self.round_index, client,
                                                     device=self.device) for client in self.client_ids)
        return self._generators

    @property
    def generator(self) -> torch.Generator:
        """The one training client's generator (sequential backend)."""
        return self.generators[self.client_ids.index(self.client_id)]

    def _draw(self, sampler, dim: int, dtype: torch.dtype) -> torch.Tensor:
        rows = [sampler(dim, generator=g, dtype=dtype, device=self.device) for g in self.generators]
        return torch.stack(rows) if self.cohort else rows[0]

    def randn(self, dim: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Standard normal draws shaped like the solver's tensors: ``[d]``, or ``[K, d]`` for a
        cohort, row ``k`` from client ``client_ids[k]``'s generator (the same numbers on every backend)."""
        return self._draw(torch.randn, dim, dtype)

    def rand(self, dim: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Uniform ``[0, 1)`` draws, shaped and keyed as :meth:`randn`."""
        return self._draw(torch.rand, dim, dtype)


@functools.lru_cache(maxsize=None)
def _accepts_context(begin_function) -> bool:
    try:
        parameters = inspect.signature(begin_function).parameters
    except (TypeError, ValueError):
        return False
    return "context" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def begin_client(solver, x, client_state, broadcast, learning_rate, context: ClientContext):
    """``solver.begin(...)`` with ``context=`` when the solver's ``begin`` takes it; a solver
    written before the context existed (four arguments) is called as it was."""
    begin = type(solver).begin
    if _accepts_context(begin):
        return solver.begin(x, client_state, broadcast, learning_rate, context=context)
    return solver.begin(x, client_state, broadcast, learning_rate)
