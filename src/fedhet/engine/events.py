"""The asynchronous loop's clients in flight, ordered by event time (docs/async.md, "The event loop").

An event is a client's arrival (its upload reaches the server) or its loss (its on-interval ended
before it could finish). Events are consumed in time order, ties broken by the lower client id; a
client has at most one job in flight, so (time, client) orders every pair of events.
"""
from __future__ import annotations

import dataclasses
import heapq
from typing import Any, Optional


@dataclasses.dataclass(frozen=True, order=True)
class Job:
    """One client's download-train-upload, keyed for ordering by (event time, client)."""

    time: float          # arrival time, or the loss time (its window's end) when lost
    client: int
    version: int         # the server version it downloaded
    start: float         # virtual time of its download
    lost: bool

    def to_state(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class EventQueue:
    """The jobs in flight as a heap on (time, client)."""

    def __init__(self, jobs: tuple[Job, ...] = ()):
        self.heap = list(jobs)
        heapq.heapify(self.heap)

    def __len__(self) -> int:
        return len(self.heap)

    def push(self, job: Job) -> None:
        heapq.heappush(self.heap, job)

    def next_time(self) -> Optional[float]:
        return self.heap[0].time if self.heap else None

    def pop(self) -> Job:
        return heapq.heappop(self.heap)

    def clients(self) -> set[int]:
        return {job.client for job in self.heap}

    def versions(self) -> set[int]:
        return {job.version for job in self.heap if not job.lost}

    def state(self) -> list[dict[str, Any]]:
        """The jobs in event order, as plain data for a checkpoint."""
        return [job.to_state() for job in sorted(self.heap)]

    @classmethod
    def from_state(cls, rows: list[dict[str, Any]]) -> "EventQueue":
        return cls(tuple(Job(time=float(row["time"]), client=int(row["client"]), version=int(row["version"]),
                             start=float(row["start"]), lost=bool(row["lost"])) for row in rows))
