"""Which clients trained in which round, kept as one bit per (round, client) and grown as rounds run.

The log is written to ``participation.pt`` (a dense ``[rounds, N]`` bool tensor) at the end of a run
and drawn as a raster; it is also part of every checkpoint, so a resumed run's log is complete.
Rules: nothing is allocated for rounds that have not run (capacity doubles as rounds are
appended), rows are bit-packed (``ceil(N / 8)`` bytes a round, 8 times less than bools), and a
checkpoint holds exactly the rounds done.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch


class ParticipationLog:
    """An append-only ``[rounds, N]`` bit matrix."""

    def __init__(self, num_clients: int):
        self.num_clients = int(num_clients)
        self.row_bytes = (self.num_clients + 7) // 8
        self._rows = np.zeros((0, self.row_bytes), dtype=np.uint8)
        self.rounds = 0

    def __len__(self) -> int:
        return self.rounds

    def append(self, client_ids: torch.Tensor) -> None:
        """Record the next round's participants (0-based ids)."""
        if self.rounds == len(self._rows):
            grown = np.zeros((max(16, 2 * len(self._rows)), self.row_bytes), dtype=np.uint8)
            grown[:self.rounds] = self._rows[:self.rounds]
            self._rows = grown
        mask = np.zeros(self.num_clients, dtype=bool)
        mask[client_ids.cpu().numpy()] = True
        self._rows[self.rounds] = np.packbits(mask)
        self.rounds += 1

    def any_participant(self) -> bool:
        """Whether any client trained in any round logged so far."""
        return bool(self._rows[:self.rounds].any())

    def dense(self) -> torch.Tensor:
        """The log as a ``[rounds, N]`` bool tensor."""
        bits = np.unpackbits(self._rows[:self.rounds], axis=1, count=self.num_clients)
        return torch.from_numpy(bits.astype(bool)).reshape(self.rounds, self.num_clients)

    def state_dict(self) -> dict[str, Any]:
        return {"num_clients": self.num_clients, "packed": torch.from_numpy(self._rows[:self.rounds].copy())}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state["num_clients"]) != self.num_clients:
            raise ValueError(f"participation log of {state['num_clients']} clients, the run has {self.num_clients}")
        rows = state["packed"].cpu().numpy().astype(np.uint8, copy=True).reshape(-1, self.row_bytes)
        self._rows, self.rounds = rows, len(rows)
