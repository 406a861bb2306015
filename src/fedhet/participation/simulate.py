"""Run a participation process on its own, for plots, statistics and tests."""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from fedhet.participation.base import ParticipationContext, ParticipationProcess, ParticipationState


def simulate_participation(process: ParticipationProcess, context: ParticipationContext, num_rounds: int,
                           *, state: Optional[ParticipationState] = None,
                           start_round: int = 0) -> torch.Tensor:
    """The ``[num_rounds, N]`` bool matrix of who participates in rounds ``start_round, ...``.

    Starts from ``process.init(context)`` unless ``state`` (the state before ``start_round``) is given.
    Processes with a ``participation_matrix(state, start_round, num_rounds, context)`` method (the
    FedAU patterns) fill the matrix directly, with the same draws as the ``sample`` calls; the others
    run one vectorised ``sample`` call per round.
    """
    if num_rounds < 0:
        raise ValueError(f"num_rounds must be >= 0, got {num_rounds}")
    if state is None:
        if start_round != 0:
            raise ValueError("start_round > 0 needs the state saved before that round")
        state = process.init(context)
    # The optional method of the docstring: (state, start_round, num_rounds, context) -> (matrix, state).
    participation_matrix: Optional[Callable[..., tuple[torch.Tensor, Any]]] = getattr(
        process, "participation_matrix", None)
    if callable(participation_matrix):
        matrix, _ = participation_matrix(state, start_round, num_rounds, context)
        return matrix
    matrix = torch.zeros(num_rounds, context.num_clients, dtype=torch.bool)
    for offset in range(num_rounds):
        client_ids, state = process.sample(state, start_round + offset, context)
        matrix[offset, client_ids] = True
    return matrix
