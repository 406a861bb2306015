"""When a client's current on-interval of an availability trace ends (docs/async.md, "The event loop").

A trace (:class:`fedhet.participation.trace.TraceState`: intervals ``[start, end]`` per client, an
optional period ``P_n``) puts client n on at time t when ``t mod P_n`` (t itself without a period) lies
in one of its intervals. The asynchronous event loop needs more than "on at t": a client starting at t
is lost when its window closes before it finishes, so :func:`window_end` gives the absolute time the
window containing t ends. A periodic client's window ending at ``P_n`` while another of its windows
starts at 0 continues into that one (one window across the period's boundary); a window covering the
whole period never ends.
"""
from __future__ import annotations

import math
from typing import Optional

import torch


class Availability:
    """Clients' on-intervals as Python lists, for per-client queries in the event loop."""

    def __init__(self, owner: torch.Tensor, start: torch.Tensor, end: torch.Tensor, period: torch.Tensor):
        self.num_clients = int(period.numel())
        self.periods = [float(p) for p in period.tolist()]
        self.windows: list[list[tuple[float, float]]] = [[] for _ in range(self.num_clients)]
        for client, a, b in zip(owner.tolist(), start.tolist(), end.tolist()):
            self.windows[int(client)].append((float(a), float(b)))
        for spans in self.windows:
            spans.sort()
        # Every client on for ever: the event loop then skips the per-client window queries.
        self.always_on = all(spans == [(0.0, math.inf)] for spans in self.windows)

    @classmethod
    def always(cls, num_clients: int) -> "Availability":
        """Every client on for ever (participation ``full``)."""
        return cls(torch.arange(num_clients), torch.zeros(num_clients, dtype=torch.float64),
                   torch.full((num_clients,), math.inf, dtype=torch.float64),
                   torch.full((num_clients,), math.inf, dtype=torch.float64))

    def any_window(self) -> bool:
        return any(self.windows)

    def window_end(self, client: int, seconds: float) -> Optional[float]:
        """The absolute time the window of ``client`` containing ``seconds`` ends; None when the
        client is off at ``seconds`` (module docstring)."""
        period = self.periods[client]
        spans = self.windows[client]
        local = seconds if math.isinf(period) else math.fmod(seconds, period)
        for a, b in spans:
            if a <= local <= b:
                end = seconds + (b - local)
                if math.isinf(period) or b < period:
                    return end
                # The window reaches the period's end: it continues into one starting at 0.
                first = spans[0]
                if first[0] > 0.0:
                    return end
                if first[1] >= period:
                    return math.inf
                return end + first[1]
        return None

    def on_later(self, seconds: float) -> bool:
        """Whether some client is on at some time after ``seconds``."""
        for client, spans in enumerate(self.windows):
            if spans and (not math.isinf(self.periods[client]) or spans[-1][1] > seconds):
                return True
        return False
