"""A warning when no client trains: a deadline shorter than every completion time, or a trace in
which nobody is on, leaves the model at its initial value while the run ends with exit status 0.

The warning comes once after :data:`EMPTY_ROUNDS_BEFORE_WARNING` rounds in which no client has
trained since the run began, and again at the end when no client trained in any round (resumed
rounds included: the participation log is part of the checkpoint). It names the likely reason from
the last round's record and the configuration.
"""
from __future__ import annotations

from typing import Any

from fedhet.engine.callbacks import Callback

EMPTY_ROUNDS_BEFORE_WARNING = 10


def empty_round_reason(config: Any, record: dict[str, Any]) -> str:
    """Why a round had no participant, as far as its record and the configuration tell."""
    system = config.system
    if record.get("clients_dropped", 0) > 0 and system is not None:
        if system.policy == "deadline":
            steps = " even for one local step" if system.partial_work else ""
            return (f"every chosen client was dropped: system.deadline = {system.deadline!r} s is shorter than "
                    f"their completion times{steps} (latency and transfers included); raise it or use faster "
                    "profiles")
        return f"every chosen client was dropped by system.policy = {system.policy!r}"
    if config.participation.name == "trace":
        trace_file = getattr(config.participation.options, "trace_file", "")
        return (f"no client of participation.trace_file = {trace_file!r} was on at the rounds' virtual times "
                f"(the clock waits system.idle_seconds after each empty round)")
    return f"participation.name = {config.participation.name!r} chose no client"


class EmptyRoundsWarning(Callback):
    """Warns (through the run's log) when no client has trained (module docstring)."""

    def __init__(self) -> None:
        self.warned = False
        self.last_record: dict[str, Any] = {}

    def on_round_end(self, run, record):
        self.last_record = record
        log = run.simulator.participations
        if (not self.warned and len(log) >= EMPTY_ROUNDS_BEFORE_WARNING and record.get("num_participants") == 0
                and not log.any_participant()):
            self.warned = True
            run.log(f"warning: no client has trained in the {len(log)} rounds so far: "
                    f"{empty_round_reason(run.config, record)}")
        return False

    def on_run_end(self, run, summary):
        log = run.simulator.participations
        if len(log) > 0 and not log.any_participant():
            run.log(f"warning: no client trained in any of the {len(log)} rounds, so the model is the initial one: "
                    f"{empty_round_reason(run.config, self.last_record)}")
