"""The virtual clock: each round's duration in virtual seconds, from profiles, bytes and the policy.

A run with a ``[system]`` section (:class:`fedhet.system.options.SystemOptions`) has a clock; one
without has none and computes exactly what it did before the clock existed. Per round
(docs/system.md, "The round under a clock")::

    S_t   = participation.sample(..., virtual_seconds = tau_t)      # trace processes read tau_t
    jobs  = one ClientJob per chosen client (its plan, c_n, links, the round's bytes)
    verdict = policies.apply_policy(system.policy, jobs)             # kept clients, K'_n, duration
    train the kept clients (cut-short ones for K'_n steps); tau_{t+1} = tau_t + duration

Bytes per client: down ``S_down = bytes(x) + bytes(server.broadcast(state))`` (SCAFFOLD's ``c``,
FedCM's ``Delta``, ...: what the server method publishes), up ``S_up = uploaded_vectors d`` elements
(``LocalSolver.uploaded_vectors``, declared next to each solver's rule). Every chosen client
downloads; the kept ones upload.

The clock's state (:class:`ClockState`: the time, the byte totals and the profiles themselves) is
part of the simulator's checkpoint, so a resumed run goes on with the same clock and the same
profiles. :class:`VirtualClock` has one call site, :meth:`fedhet.engine.simulator.Simulator._run_round`.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple, Optional

import torch

from fedhet.client.schedule import plan_local_work
from fedhet.core.resume_inputs import saved_state
from fedhet.core.task import FederatedTask
from fedhet.errors import FedhetError
from fedhet.participation.base import ParticipationContext
from fedhet.system.flops import forward_flops_per_example
from fedhet.system.options import SystemOptions
from fedhet.system.policies import RoundTiming, apply_policy
from fedhet.system.profiles import ClientProfiles, load_profiles
from fedhet.system.time_model import ClientJob, communication_seconds

# The record keys the clock adds to every round (docs/system.md, "Metrics").
CLOCK_RECORD_KEYS = ("virtual_seconds", "round_seconds", "bytes_up", "bytes_down", "clients_dropped",
                     "clients_cut_short")


class ClockOverflowError(FedhetError, ValueError):
    """The virtual time became infinite: a profile's times are beyond float64 (a latency of 1e308)."""


def _clock_overflow(now: float, timing: RoundTiming, jobs: list[ClientJob], round_index: int) -> ClockOverflowError:
    # Records would hold Infinity (not JSON) and a trace's `t mod P` would be NaN from here on: stop,
    # naming the slowest client's parts of its completion time.
    slowest = max(jobs, key=lambda job: job.seconds())
    return ClockOverflowError(
        f"round {round_index + 1}: the virtual clock would reach {now + timing.duration!r} seconds (this round lasts "
        f"{timing.duration!r}; client {slowest.client} needs {slowest.seconds()!r} s: "
        f"{slowest.communication_seconds!r} s of latency and transfer, {slowest.seconds_per_sample!r} s per example); "
        "the profiles' times must stay finite: lower system.latency or the profile file's values, or raise "
        "system.device_flops")


class ClockState(NamedTuple):
    """Virtual seconds since the run began, byte totals, and the per-client profile the clock uses."""

    now: float
    bytes_up: float
    bytes_down: float
    seconds_per_sample: torch.Tensor    # [N] float64, c_n for this run's model
    uplink_bps: torch.Tensor            # [N] float64
    downlink_bps: torch.Tensor          # [N] float64
    latency: torch.Tensor               # [N] float64


@dataclasses.dataclass(frozen=True)
class RoundPlan:
    """A round's verdict with the ids to train and the bytes each client moves."""

    timing: RoundTiming
    client_ids: torch.Tensor            # kept ids, sorted int64
    chosen: int
    upload_bytes: float                 # per kept client
    download_bytes: float               # per chosen client


class VirtualClock:
    """The clock of one run: its options, the model's FLOPs per example and ``k`` for overcommit."""

    def __init__(self, options: SystemOptions, profiles: ClientProfiles, flops_per_example: float,
                 keep: Optional[int] = None):
        if options.policy == "overcommit" and keep is None:
            raise ValueError("system.policy = 'overcommit' needs keep (k, the clients kept per round)")
        self.options = options
        self.profiles = profiles
        self.flops_per_example = float(flops_per_example)
        self.keep = keep

    def init(self) -> ClockState:
        return ClockState(now=0.0, bytes_up=0.0, bytes_down=0.0,
                          seconds_per_sample=self.profiles.compute_seconds_per_sample(self.flops_per_example),
                          uplink_bps=self.profiles.uplink_bps.clone(), downlink_bps=self.profiles.downlink_bps.clone(),
                          latency=self.profiles.latency.clone())

    def participation_context(self, state: ClockState, context: ParticipationContext) -> ParticipationContext:
        """The participation context of a round starting at ``state.now``."""
        return dataclasses.replace(context, virtual_seconds=float(state.now))

    def plan(self, state: ClockState, task: FederatedTask, solver: Any, client_ids: torch.Tensor,
             broadcast: dict[str, torch.Tensor], params: torch.Tensor, *, seed: int, round_index: int) -> RoundPlan:
        """The policy's verdict on the chosen ``client_ids`` (module docstring)."""
        download = float(params.numel() * params.element_size()
                         + sum(value.numel() * value.element_size() for value in broadcast.values()))
        upload = float(solver.uploaded_vectors * params.numel() * params.element_size())
        options = solver.options
        ids = client_ids.tolist()
        # One gather per profile column, not one tensor index per client (plan is per round, K clients).
        uplink, downlink, latency, speed = (column[client_ids].tolist() for column in (
            state.uplink_bps, state.downlink_bps, state.latency, state.seconds_per_sample))
        jobs = []
        for position, client in enumerate(ids):
            start, end = task.client_range(client)
            plan = plan_local_work(end - start, batch_size=options.batch_size, epochs=options.epochs,
                                   steps=options.steps, system=options.system, seed=seed,
                                   round_index=round_index, client_id=client)
            jobs.append(ClientJob(
                client=client,
                communication_seconds=communication_seconds(
                    upload_bytes=upload, download_bytes=download, uplink_bps=uplink[position],
                    downlink_bps=downlink[position], latency=latency[position]),
                seconds_per_sample=speed[position], steps=plan.num_steps,
                batch_size=plan.batch_size, num_examples=end - start, epoch_mode=plan.epochs > 0))
        system = self.options
        timing = apply_policy(system.policy, jobs, deadline=system.deadline, partial_work=system.partial_work,
                              keep=self.keep, idle_seconds=system.idle_seconds)
        if not math.isfinite(state.now + timing.duration):
            raise _clock_overflow(state.now, timing, jobs, round_index)
        return RoundPlan(timing, torch.tensor(timing.kept, dtype=torch.int64), len(jobs), upload, download)

    def advance(self, state: ClockState, plan: RoundPlan, trained: int) -> tuple[ClockState, dict[str, Any]]:
        """The state after the round and the record's clock keys (:data:`CLOCK_RECORD_KEYS`);
        ``trained`` is the number of clients whose uploads arrived."""
        timing = plan.timing
        bytes_up = plan.upload_bytes * trained
        bytes_down = plan.download_bytes * plan.chosen
        now = state.now + timing.duration
        new = state._replace(now=now, bytes_up=state.bytes_up + bytes_up, bytes_down=state.bytes_down + bytes_down)
        return new, {"virtual_seconds": now, "round_seconds": timing.duration, "bytes_up": bytes_up,
                     "bytes_down": bytes_down, "clients_dropped": timing.dropped,
                     "clients_cut_short": timing.cut_short}


def build_clock(system: Optional[SystemOptions], task: FederatedTask, participation_options: Any, *,
                seed: int) -> tuple[Optional[VirtualClock], Any]:
    """The run's clock (None without ``[system]``) and the participation options it needs: under
    ``overcommit`` the process chooses ``ceil(f k)`` clients (at most N) and the clock keeps k."""
    if system is None:
        return None, participation_options
    saved = saved_state("clock", ClockState._fields) if system.profiles == "file" else None
    if saved is not None:
        # Resuming: the checkpoint's clock holds the profiles the run started with (c_n for this
        # model, links, latency); the profile file, which may have changed or gone, is not read again.
        profiles = ClientProfiles(device_flops=torch.full_like(saved["latency"], math.nan),
                                  seconds_per_sample=saved["seconds_per_sample"], uplink_bps=saved["uplink_bps"],
                                  downlink_bps=saved["downlink_bps"], latency=saved["latency"])
    else:
        profiles = load_profiles(system, task.num_clients, seed)
    # The model reads the stored inputs as they are (as fedhet.core.task's evaluation does).
    example = task.train.inputs[:1]
    flops = forward_flops_per_example(task.model, example)
    keep = None
    if system.policy == "overcommit":
        keep = int(participation_options.clients_per_round)
        # f k beyond N (an overcommit of 1e308 included, whose ceil is no integer) chooses every client.
        wanted = system.overcommit * keep
        chosen = task.num_clients if wanted >= task.num_clients else math.ceil(wanted)
        participation_options = dataclasses.replace(participation_options, clients_per_round=chosen)
    return VirtualClock(system, profiles, flops, keep), participation_options


def clock_summary(state: ClockState, records: list[dict[str, Any]], target: Optional[float]) -> dict[str, Any]:
    """The summary's clock keys: total virtual seconds and bytes, and the virtual seconds at which
    the test accuracy first reached ``target`` (None when it did not, or no target)."""
    reached = None
    if target is not None:
        for record in records:
            if record.get("test_accuracy", -math.inf) >= target and "virtual_seconds" in record:
                reached = float(record["virtual_seconds"])
                break
    return {"virtual_seconds": float(state.now), "bytes_up_total": float(state.bytes_up),
            "bytes_down_total": float(state.bytes_down), "virtual_seconds_to_target": reached}
