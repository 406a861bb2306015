"""Asynchronous FL on the virtual clock: FedBuff and FedAsync as an event loop (docs/async.md).

:class:`AsyncSimulator` is a :class:`~fedhet.engine.simulator.Simulator` whose "round" is one server
version: :meth:`run_round` runs the event loop until the next server step and returns that step's
record, so ``fedhet run``, its records, evaluation (``run.eval_every`` in versions) and checkpoints
(at server-step boundaries) work unchanged. The loop (docs/async.md, "The event loop")::

    repeat until a server step has happened:
        if an event is due at t: take the one with the lowest client id
            loss:    free its slot; clients_lost += 1
            arrival: train the job from x_{v_k}; tau_k = v - v_k
                     fedbuff: buffer it; at K buffered updates, one server step, v += 1
                     fedasync: one server step, v += 1
        else: start clients in the free slots at t; t <- the next event time
              (or t + system.idle_seconds while a slot stays free)

**FedBuff** (Nguyen et al., "Federated Learning with Buffered Asynchronous Aggregation", AISTATS 2022,
Algorithm 1): with the buffer's updates ``Delta_k`` (client k trained from version ``v_k``)::

    Delta'_k = s(tau_k) Delta_k,   tau_k = v - v_k
    x_{v+1}  = server.step(x_v, cohort {Delta'_k})     # FedAvg: x_v + eta_g sum_k p_k s(tau_k) Delta_k

through any registered server method; the paper's ``(eta_g / K) sum_k s(tau_k) Delta_k`` is
``server.name = "average_participating"``. A server state keyed by client sees the buffer as the
step's cohort: FedAWARE's momentum ``m_n`` takes client n's weighted update at the step it arrives in,
FedAU counts a client's interval in server steps, MIFA's and FedVarp's tables keep its latest weighted
update, SCAFFOLD's clients read the ``c`` of the version they downloaded (docs/async.md, "FedBuff").

**FedAsync** (Xie, Koyejo, Gupta, "Asynchronous Federated Optimization", 2019, Algorithm 1 and
section 5.2): every arrival is a server step::

    y       = x_{v_k} + Delta_k
    alpha_t = alpha s(tau),  tau = v - v_k
    x_{v+1} = (1 - alpha_t) x_v + alpha_t y

No server state keyed by client is used (its mixing is the server step).

``s`` is :func:`fedhet.system.asynchronous.staleness_weight`. A job trains from the version it
downloaded, with the streams of synchronous round ``v_k`` (RoundWork with
``round_index = v_k``): a client trains at most one job per version that reaches the server, so
(seed, v_k, client) keys its batches. The jobs in flight that downloaded the same version are trained
together, as one cohort, when the first of them arrives (:meth:`AsyncSimulator._train`).
"""
from __future__ import annotations

import math
from typing import Any, Optional

import torch

from fedhet.backends.base import RoundWork
from fedhet.client.base import with_effective_steps
from fedhet.client.schedule import plan_local_work
from fedhet.core.cohort import Cohort
from fedhet.core.options import ConfigError
from fedhet.core.seeding import torch_generator
from fedhet.core.task import FederatedTask
from fedhet.engine.events import EventQueue, Job
from fedhet.engine.simulator import Simulator
from fedhet.errors import FedhetError
from fedhet.system.asynchronous import AsyncOptions, staleness_weight
from fedhet.system.availability import Availability
from fedhet.system.time_model import ClientJob, communication_seconds

# Consecutive losses and idle waits without an arrival after which the run stops: clients' windows
# are too short for their jobs, or nobody comes back on.
MAX_FRUITLESS_EVENTS = 1_000_000


class AsyncStalledError(FedhetError, RuntimeError):
    """No update can reach the server any more (no client is available again, or every job is lost)."""


class Buffered:
    """One arrived update waiting in FedBuff's buffer."""

    def __init__(self, job: Job, cohort: Cohort, staleness: int, weight: float):
        self.job, self.cohort, self.staleness, self.weight = job, cohort, staleness, weight


def _cohort_row(cohort: Cohort, row: int) -> Cohort:
    """Row ``row`` of ``cohort`` as a cohort of one."""
    pick = slice(row, row + 1)
    return Cohort(client_ids=cohort.client_ids[pick], deltas=cohort.deltas[pick],
                  num_examples=cohort.num_examples[pick], local_steps=cohort.local_steps[pick],
                  train_loss=cohort.train_loss[pick], extras={name: value[pick] for name, value in cohort.extras.items()})


def _cohort_state(cohort: Cohort) -> dict[str, Any]:
    return {"client_ids": cohort.client_ids, "deltas": cohort.deltas, "num_examples": cohort.num_examples,
            "local_steps": cohort.local_steps, "train_loss": cohort.train_loss, "extras": dict(cohort.extras)}


def _concat_cohorts(rows: list[Cohort]) -> Cohort:
    """The one-client cohorts ``rows`` (ascending client ids) as one cohort."""
    return Cohort(client_ids=torch.cat([row.client_ids for row in rows]),
                  deltas=torch.cat([row.deltas for row in rows]),
                  num_examples=torch.cat([row.num_examples for row in rows]),
                  local_steps=torch.cat([row.local_steps for row in rows]),
                  train_loss=torch.cat([row.train_loss for row in rows]),
                  extras={name: torch.cat([row.extras[name] for row in rows]) for name in rows[0].extras})


class AsyncSimulator(Simulator):
    """The event loop of the module docstring; ``asynchronous`` is the ``[asynchronous]`` section.
    Needs the virtual clock (``clock``)."""

    def __init__(self, task: FederatedTask, *, asynchronous: AsyncOptions, **kwargs: Any):
        super().__init__(task, **kwargs)
        if self.clock is None or self.clock_state is None:
            raise ConfigError("asynchronous", "{...}", "needs the virtual clock: add a [system] section (docs/async.md)")
        self.options = asynchronous
        if asynchronous.concurrency > task.num_clients:
            raise ConfigError("asynchronous.concurrency", asynchronous.concurrency,
                              f"must be at most the number of clients ({task.num_clients})")
        if asynchronous.mode == "fedasync" and self.solver.server_stage() is not None:
            raise ConfigError("asynchronous.mode", "fedasync",
                              f"{type(self.solver).__name__} reads server-side state that only a server step "
                              "updates, and FedAsync's mixing has none; use mode = 'fedbuff'")
        owner = getattr(self.participation_state, "owner", None)
        if owner is not None:
            state = self.participation_state
            self.availability = Availability(owner, state.start, state.end, state.period)
        else:
            self.availability = Availability.always(task.num_clients)
        if not self.availability.any_window():
            raise ConfigError("participation.trace_file", getattr(self.process, "trace_file", ""),
                              "no client is ever available in this trace; the asynchronous loop cannot start")
        self.upload_bytes = float(self.solver.uploaded_vectors * self.params.numel() * self.params.element_size())
        self.queue = EventQueue()
        self.buffer: list[Buffered] = []
        self.models: dict[int, tuple[torch.Tensor, dict[str, torch.Tensor]]] = {}   # version -> (x_v, broadcast_v)
        # Client in flight -> its upload and new per-client state, trained with its version's first arrival.
        self.trained: dict[int, tuple[Cohort, dict[str, torch.Tensor]]] = {}
        self.started = 0                      # clients started so far (the start stream's counter)
        self.fruitless = 0                    # losses and idle waits since the last arrival
        self.histogram: dict[int, int] = {}   # staleness -> updates applied
        self.totals = {"clients_lost": 0, "clients_started": 0}
        # Set to a list to have every start, loss and arrival appended as a dict (tests, debugging);
        # not checkpointed.
        self.event_log: Optional[list[dict[str, Any]]] = None
        self._reset_period(0.0)

    def _log(self, event: str, **fields: Any) -> None:
        if self.event_log is not None:
            self.event_log.append({"event": event, "time": self.now, **fields})

    def _reset_period(self, now: float) -> None:
        """Counters of the records' keys, from the last server step (at ``now``) on."""
        self.period = {"since": now, "busy_seconds": 0.0, "clients_lost": 0, "clients_started": 0,
                       "bytes_up": 0.0, "bytes_down": 0.0}

    # --- the event loop --------------------------------------------------------------------------
    @property
    def now(self) -> float:
        assert self.clock_state is not None
        return float(self.clock_state.now)

    def _set_now(self, seconds: float) -> None:
        assert self.clock_state is not None
        if not math.isfinite(seconds):
            raise FedhetError(f"the virtual clock would reach {seconds!r} seconds; the profiles' times must stay "
                              "finite (lower system.latency or raise system.device_flops)")
        self.period["busy_seconds"] += len(self.queue) * (seconds - self.now)
        self.clock_state = self.clock_state._replace(now=seconds)

    def _run_round(self) -> tuple[dict[str, Any], Cohort]:
        """Events until the next server step; that step's record and cohort."""
        while True:
            next_time = self.queue.next_time()
            if next_time is not None and next_time <= self.now:
                done = self._consume(self.queue.pop())
                if done is not None:
                    return done
                continue
            self._start_clients()
            free = self.options.concurrency - len(self.queue)
            times = [t for t in (self.queue.next_time(),) if t is not None]
            if free > 0:
                if not self.queue and not self.availability.on_later(self.now):
                    raise AsyncStalledError(
                        f"no client is available after virtual second {self.now:g} and none is training; the "
                        f"run cannot reach server version {self.next_round + 1} (the trace ends)")
                assert self.clock is not None
                retry = self.now + self.clock.options.idle_seconds
                if not times or retry < times[0]:
                    self.fruitless += 1
                times.append(retry)
            if self.fruitless > MAX_FRUITLESS_EVENTS:
                raise AsyncStalledError(
                    f"no update reached the server in {MAX_FRUITLESS_EVENTS} events up to virtual second "
                    f"{self.now:g}: the clients' on-intervals are too short for their jobs")
            self._set_now(min(times))

    def _eligible(self) -> list[tuple[int, float]]:
        """Idle available clients at ``now`` with their windows' ends, ascending ids (docs/async.md,
        "The event loop")."""
        busy = self.queue.clients() | {entry.job.client for entry in self.buffer}
        if self.availability.always_on:
            return [(client, math.inf) for client in range(self.task.num_clients) if client not in busy]
        now = self.now
        eligible = []
        for client in range(self.task.num_clients):
            if client in busy:
                continue
            end = self.availability.window_end(client, now)
            if end is not None and end > now:
                eligible.append((client, end))
        return eligible

    def _start_clients(self) -> None:
        free = self.options.concurrency - len(self.queue)
        if free <= 0:
            return
        eligible = self._eligible()
        if not eligible:
            return
        version = self.next_round
        broadcast = self.server.broadcast(self.server_state)
        download = float(self.params.numel() * self.params.element_size()
                         + sum(value.numel() * value.element_size() for value in broadcast.values()))
        now = self.now
        for _ in range(min(free, len(eligible))):
            generator = torch_generator(self.seed, "async_start", self.started)
            client, window_end = eligible.pop(int(torch.randint(len(eligible), (1,), generator=generator)))
            finish = now + self._job_seconds(client, version, download)
            lost = finish > window_end
            self.queue.push(Job(time=window_end if lost else finish, client=client, version=version, start=now,
                                lost=lost))
            if not lost and version not in self.models:
                # A copy of the broadcast: a server stage may update its state in place (a consumed
                # state, docs/design.md "State") while this version's clients still train from it.
                self.models[version] = (self.params, {name: value.clone() for name, value in broadcast.items()})
            self._log("start", client=client, version=version, lost=lost)
            self.started += 1
            self.period["clients_started"] += 1
            self.period["bytes_down"] += download

    def _job_seconds(self, client: int, version: int, download: float) -> float:
        """``T_n(K)`` of the client's full plan for version ``version`` (docs/system.md, "Time model")."""
        state = self.clock_state
        assert state is not None
        options = self.solver.options
        first, last = self.task.client_range(client)
        plan = plan_local_work(last - first, batch_size=options.batch_size, epochs=options.epochs,
                               steps=options.steps, system=options.system, seed=self.seed,
                               round_index=version, client_id=client)
        job = ClientJob(client=client, communication_seconds=communication_seconds(
            upload_bytes=self.upload_bytes, download_bytes=download, uplink_bps=float(state.uplink_bps[client]),
            downlink_bps=float(state.downlink_bps[client]), latency=float(state.latency[client])),
            seconds_per_sample=float(state.seconds_per_sample[client]), steps=plan.num_steps,
            batch_size=plan.batch_size, num_examples=last - first, epoch_mode=plan.epochs > 0)
        return job.seconds()

    def _release_models(self) -> None:
        """Forget the models no client in flight downloaded."""
        keep = self.queue.versions()
        self.models = {version: model for version, model in self.models.items() if version in keep}

    def _train(self, job: Job) -> Cohort:
        """``job``'s upload; writes the client's per-client state. The first arrival of a version
        trains every job in flight that downloaded it and is not trained yet, as one cohort (one
        backend call, so a multi-process or vectorized backend trains them together); the others'
        uploads wait in :attr:`trained` until they arrive. A client's numbers depend only on its
        (seed, version, client) streams, not on which jobs share its cohort."""
        if job.client not in self.trained:
            group = sorted({job.client} | {other.client for other in self.queue.heap
                                           if not other.lost and other.version == job.version
                                           and other.client not in self.trained})
            params, broadcast = self.models[job.version]
            ids = torch.tensor(group, dtype=torch.int64)
            learning_rate = self.learning_rate(job.version)
            work = RoundWork(round_index=job.version, seed=self.seed, params=params, client_ids=ids,
                             client_states={name: store.read(ids) for name, store in self.client_stores.items()},
                             broadcast=broadcast, learning_rate=learning_rate)
            cohort, new_states = self.backend.train_cohort(self.task, self.solver, work)
            with_effective_steps(cohort, self.solver, learning_rate)
            for row, client in enumerate(cohort.client_ids.tolist()):
                self.trained[int(client)] = (_cohort_row(cohort, row),
                                             {name: value[row:row + 1] for name, value in new_states.items()})
        cohort, states = self.trained.pop(job.client)
        for name, store in self.client_stores.items():
            store.write(cohort.client_ids.to(torch.int64).cpu(), states[name])
        return cohort

    def _consume(self, job: Job) -> Optional[tuple[dict[str, Any], Cohort]]:
        """One event; the step's record and cohort when it completed a server step."""
        if job.lost:
            self._log("lost", client=job.client, version=job.version)
            self.period["clients_lost"] += 1
            self.fruitless += 1
            return None
        self.fruitless = 0
        cohort = self._train(job)
        self.period["bytes_up"] += self.upload_bytes
        staleness = self.next_round - job.version
        weight = staleness_weight(self.options, staleness)
        self._log("arrival", client=job.client, version=job.version, staleness=staleness, weight=weight)
        if self.options.mode == "fedasync":
            start_params = self.models[job.version][0]
            self._release_models()
            return self._fedasync_step(Buffered(job, cohort, staleness, weight), start_params)
        self._release_models()
        self.buffer.append(Buffered(job, cohort, staleness, weight))
        if len(self.buffer) < self.options.buffer_size:
            return None
        return self._fedbuff_step()

    # --- server steps ----------------------------------------------------------------------------
    def _fedbuff_step(self) -> tuple[dict[str, Any], Cohort]:
        entries = sorted(self.buffer, key=lambda entry: entry.job.client)
        self.buffer = []
        rows = []
        for entry in entries:
            row = entry.cohort
            if entry.weight != 1.0:
                row = Cohort(row.client_ids, row.deltas * entry.weight, row.num_examples, row.local_steps,
                             row.train_loss, row.extras)
            rows.append(row)
        cohort = _concat_cohorts(rows)
        learning_rate = self.learning_rate(self.next_round)
        params, server_metrics = self.server_step(cohort, f"server step {self.next_round + 1}")
        return self._finish_step(cohort, params, server_metrics, entries, learning_rate)

    def _fedasync_step(self, entry: Buffered, start_params: torch.Tensor) -> tuple[dict[str, Any], Cohort]:
        alpha_t = self.options.alpha * entry.weight
        client_model = start_params + entry.cohort.deltas[0]
        params = self.params * (1.0 - alpha_t) + client_model * alpha_t
        return self._finish_step(entry.cohort, params, {"mixing_weight": alpha_t}, [entry],
                                 self.learning_rate(self.next_round))

    def _finish_step(self, cohort: Cohort, params: torch.Tensor, server_metrics: dict[str, float],
                     entries: list[Buffered], learning_rate: float) -> tuple[dict[str, Any], Cohort]:
        client_ids = cohort.client_ids.to(torch.int64).cpu()
        record = self.commit_step(cohort, params, server_metrics, client_ids, learning_rate,
                                  f"server step {self.next_round + 1}")
        record.update(self._step_metrics(entries))
        return record, cohort

    def _step_metrics(self, entries: list[Buffered]) -> dict[str, Any]:
        """The record's clock and asynchronous keys (docs/async.md, "Metrics"); starts a new period."""
        assert self.clock_state is not None
        period, now = self.period, self.now
        stalenesses = [entry.staleness for entry in entries]
        for tau in stalenesses:
            self.histogram[tau] = self.histogram.get(tau, 0) + 1
        for key in self.totals:
            self.totals[key] += period[key]
        elapsed = now - period["since"]
        self.clock_state = self.clock_state._replace(bytes_up=self.clock_state.bytes_up + period["bytes_up"],
                                                     bytes_down=self.clock_state.bytes_down + period["bytes_down"])
        metrics = {"virtual_seconds": now, "round_seconds": elapsed, "bytes_up": period["bytes_up"],
                   "bytes_down": period["bytes_down"], "clients_dropped": period["clients_lost"],
                   "clients_cut_short": 0, "server_version": self.next_round,
                   "staleness_mean": sum(stalenesses) / len(stalenesses), "staleness_max": max(stalenesses),
                   "clients_lost": period["clients_lost"], "clients_started": period["clients_started"],
                   "concurrency_in_use": period["busy_seconds"] / elapsed if elapsed > 0 else float(len(self.queue))}
        self._reset_period(now)
        return metrics

    def async_summary(self) -> dict[str, Any]:
        """The summary's asynchronous keys (docs/async.md, "Metrics")."""
        return {"staleness_histogram": {str(tau): count for tau, count in sorted(self.histogram.items())},
                "clients_lost_total": self.totals["clients_lost"],
                "clients_started_total": self.totals["clients_started"]}

    # --- state -----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The simulator's state plus the loop's, at a server-step boundary (FedBuff's buffer is empty
        there; the models of the versions in flight are kept, docs/async.md "Determinism and resume")."""
        if self.buffer:
            raise RuntimeError("an asynchronous run is checkpointed between server steps only")
        return {**super().state_dict(), "asynchronous": {
            "queue": self.queue.state(), "started": self.started, "fruitless": self.fruitless,
            "models": [{"version": version, "params": params, "broadcast": dict(broadcast)}
                       for version, (params, broadcast) in sorted(self.models.items())],
            "trained": [{"cohort": _cohort_state(cohort), "states": dict(states)}
                        for _client, (cohort, states) in sorted(self.trained.items())],
            "histogram": [[tau, count] for tau, count in sorted(self.histogram.items())],
            "totals": dict(self.totals), "period": dict(self.period)}}

    def load_state(self, saved: dict[str, Any]) -> None:
        super().load_state(saved)
        loop = saved["asynchronous"]
        self.queue = EventQueue.from_state(list(loop["queue"]))
        self.started, self.fruitless = int(loop["started"]), int(loop["fruitless"])
        self.models = {int(row["version"]): (row["params"].to(self.device, self.task.dtype),
                                             {name: value.to(self.device) for name, value in row["broadcast"].items()})
                       for row in loop["models"]}
        self.trained = {}
        for row in loop["trained"]:
            saved_cohort = row["cohort"]
            cohort = Cohort(**{key: value.to(self.device) if key == "deltas" else value
                               for key, value in saved_cohort.items() if key != "extras"},
                            extras={name: value.to(self.device) for name, value in saved_cohort["extras"].items()})
            self.trained[int(cohort.client_ids[0])] = (cohort, {name: value for name, value in row["states"].items()})
        self.histogram = {int(tau): int(count) for tau, count in loop["histogram"]}
        self.totals = {key: int(value) for key, value in loop["totals"].items()}
        self.period = dict(loop["period"])
        self.buffer = []


def async_simulator_type(options: AsyncOptions) -> type[Simulator]:
    """:class:`AsyncSimulator` with the ``[asynchronous]`` section ``options`` bound: a Simulator type
    taking the Simulator's own arguments (what :func:`fedhet.engine.assembly.simulator_from_config`
    builds)."""
    class BoundAsyncSimulator(AsyncSimulator):
        def __init__(self, task: FederatedTask, **kwargs: Any):
            super().__init__(task, asynchronous=options, **kwargs)
    return BoundAsyncSimulator
