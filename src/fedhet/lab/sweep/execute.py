"""Run a sweep plan: skip finished runs, resume interrupted ones, start the others.

With ``jobs == 1`` the runs execute one after another in this process. With ``jobs > 1`` the runs
go to ``jobs`` long-lived worker processes (:mod:`fedhet.lab.sweep.worker_pool`), each running one
run at a time with one torch thread (``OMP_NUM_THREADS=1``; the runner's default of ``run.threads``)
and keeping its imports and loaded datasets from run to run: many
small federated kernels gain little from a second intra-op thread, and several processes
oversubscribing the cores slow every one of them (see :func:`fedhet.engine.runner.configure_threads`),
so a core per run is the fastest way through a sweep. The default is one job per usable core.

A failed run does not stop the sweep: it is reported (with the end of its ``sweep.log``) and the
sweep's result lists it; running the same sweep again retries it (resuming from its checkpoint when
it has one). Interrupting the sweep (Ctrl-C) stops the workers; running it again resumes.

With ``executor = "ray"`` (``--executor ray`` or the base file's ``[sweep]`` table) the runs are Ray
tasks on a cluster instead, one resource bundle each (:mod:`fedhet.lab.sweep.ray_executor`); the
plan, the skipping and resuming, the manifest and the progress view are the same.
"""
from __future__ import annotations

import dataclasses
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, TextIO

from fedhet.core import append_log_text, atomic_write_json, check_log_file
from fedhet.engine import Callback, DatasetCache, DirectoryLock, clear_run_directory, read_metrics
from fedhet.lab.sweep.grid import SweepError
from fedhet.lab.sweep.options import SweepOptions
from fedhet.lab.sweep.outcome import RunOutcome, show_outcome, tail_of
from fedhet.lab.sweep.plan import (
    FINISHED,
    NEW,
    RESUME,
    SWEEP_FILE,
    SWEEP_RUN_FILE,
    PlannedRun,
    SweepPlan,
    read_summary,
    run_state,
)
from fedhet.lab.sweep.progress import DONE, FAILED, RUNNING, SKIPPED, SweepProgress
from fedhet.lab.sweep.schedule import estimated_cost, longest_first, rounds_done
from fedhet.lab.sweep.worker import LOG_FILE, execute_run, failure_status
from fedhet.lab.sweep.worker_pool import WorkerPool

if TYPE_CHECKING:
    from fedhet.engine import LockstepGroup


@dataclasses.dataclass
class SweepResult:
    plan: SweepPlan
    outcomes: list[RunOutcome]

    @property
    def failed(self) -> list[RunOutcome]:
        return [o for o in self.outcomes if o.status == FAILED]

    @property
    def ran(self) -> list[RunOutcome]:
        return [o for o in self.outcomes if o.status == DONE]


def default_jobs() -> int:
    from fedhet.core import usable_cpus

    return usable_cpus()


def check_states(plan: SweepPlan, *, overwrite: bool) -> dict[str, tuple[str, bool]]:
    """Each run's ``(state, replace)``: new / resume / finished, and whether its directory must be
    emptied first. A directory holding a different configuration is an error listing them all,
    unless ``overwrite``: then that run starts afresh in an emptied directory."""
    states, conflicts = {}, []
    for run in plan.runs:
        state, conflict = run_state(run)
        if conflict is not None and not overwrite:
            conflicts.append(f"  {run.run_dir}: {conflict}")
        states[run.name] = (NEW, True) if conflict is not None else (state, False)
    if conflicts:
        raise SweepError("run directories of this sweep hold other runs:\n" + "\n".join(conflicts)
                         + "\nchoose another --out, or pass --overwrite to rerun them from scratch")
    return states


def _latest_record(run_dir: Path) -> Optional[dict[str, Any]]:
    records = read_metrics(run_dir / "metrics.jsonl")
    return records[-1] if records else None


def _prepare(run: PlannedRun, plan: SweepPlan, replace: bool) -> None:
    if replace and run.run_dir.exists():
        # Only fedhet's files go (fedhet.engine.rundir), under the run's lock: a run still
        # writing there (a `fedhet run` the user started) makes this a one-line error.
        with DirectoryLock(run.run_dir):
            clear_run_directory(run.run_dir, sweep_files=True)
    run.run_dir.mkdir(parents=True, exist_ok=True)
    # The run's sweep.log is appended to by whichever process runs it: a planted link, hard link or
    # FIFO there stops the sweep here, before anything runs, rather than being written through.
    check_log_file(run.run_dir / LOG_FILE)
    atomic_write_json(run.run_dir / SWEEP_RUN_FILE, run.metadata(plan))


class _ProgressCallback(Callback):
    """Feeds the in-process run's evaluated rounds to the progress view."""

    def __init__(self, view: SweepProgress, name: str):
        self.view, self.name = view, name

    def on_round_end(self, run, record):
        if "test_accuracy" in record:
            self.view.update(self.name, round=record["round"], accuracy=record["test_accuracy"])
        else:
            self.view.tick()
        return False


# The prefix of the lines a lockstep member writes in its run's log about the group (fedhet.engine.lockstep:
# a run the vectorised backend refuses says there why it trains alone); the sweep repeats them as notes.
LOCKSTEP_PREFIX = "lockstep: "
# Why a run whose setting no other run of the sweep shares trains alone, not in a group of one.
NO_PARTNER = ("lockstep: this run trains alone: no other run of the sweep shares its dataset, model, dtype, "
              "device and local solver")
Notes = Callable[[str], None]


def _run_in_process(run: PlannedRun, state: str, view: SweepProgress, datasets: DatasetCache,
                    lockstep: Optional[LockstepGroup] = None, notes: Optional[Notes] = None) -> RunOutcome:
    log_path = run.run_dir / LOG_FILE
    with append_log_text(log_path) as log_file:     # never through a planted link (fedhet.core.log_files)
        def log(message: str) -> None:
            log_file.write(message + "\n")
            log_file.flush()
            if lockstep is not None and notes is not None and message.startswith(LOCKSTEP_PREFIX):
                notes(f"{run.name}: {message}")
        try:
            summary = execute_run(run.config, run.run_dir, resume=state == RESUME,
                                  callbacks=[_ProgressCallback(view, run.name)], log=log, datasets=datasets,
                                  lockstep=lockstep)
        except Exception as error:  # one failed run must not stop the sweep; the log has the traceback
            log_file.write(traceback.format_exc())
            return RunOutcome(run, FAILED, error=f"{type(error).__name__}: {error}", exit_status=failure_status(error))
    return RunOutcome(run, DONE, summary=summary)


def _lockstep_setting(run: PlannedRun, options: SweepOptions) -> Optional[tuple]:
    """What the runs of one lockstep group share (dataset, model, dtype, device, local solver), or None
    when ``run`` trains alone whatever the others are (``auto`` on a device other than CUDA; ``options``
    is not ``off``)."""
    from fedhet.engine import resolve_device

    config = run.config
    device = resolve_device(config.run.device)
    if options.lockstep == "auto" and device.type != "cuda":
        return None
    return (config.data.name, repr(config.data.options), repr(config.model), config.run.dtype, str(device),
            config.client.name)


def lockstep_plan(todo: list[tuple[PlannedRun, str]], options: SweepOptions
                  ) -> tuple[list[list[tuple[PlannedRun, str]]], list[tuple[PlannedRun, str]]]:
    """The lockstep groups of ``todo`` (``options.lockstep``) and the runs that would join one but train
    alone because no other run shares their setting (:data:`NO_PARTNER`; not said when only one run
    would join). A group holds at most ``options.lockstep_runs`` runs that share a dataset, model, dtype,
    device and local solver (runs that differ elsewhere train in one group's separate batches:
    fedhet.engine.lockstep), the runs of a larger set split evenly. ``auto`` takes the runs that compute
    on a CUDA device: on the CPU, runs alone in worker processes measured faster (benchmarks/README.md,
    "Lockstep runs")."""
    if options.lockstep == "off":
        return [], []
    groups: dict[tuple, list[tuple[PlannedRun, str]]] = {}
    for run, state in todo:
        setting = _lockstep_setting(run, options)
        if setting is not None:
            groups.setdefault(setting, []).append((run, state))
    together = [chunk for group in groups.values() if len(group) > 1
                for chunk in _even_chunks(group, options.lockstep_runs)]
    alone = [group[0] for group in groups.values() if len(group) == 1]
    return together, alone if len(groups) > 1 else []


def _even_chunks(items: list, most: int) -> list[list]:
    """``items`` in the fewest chunks of at most ``most``, their sizes differing by at most one (65 runs
    of at most 64: 33 and 32, not 64 and a group of one)."""
    count = -(-len(items) // most)
    base, extra = divmod(len(items), count)
    bounds = [0]
    for index in range(count):
        bounds.append(bounds[-1] + base + (index < extra))
    return [items[start:end] for start, end in zip(bounds, bounds[1:])]


def _run_lockstep_groups(todo: list[tuple[PlannedRun, str]], options: SweepOptions, view: SweepProgress,
                         outcomes: dict[str, RunOutcome], notes: Notes) -> list[tuple[PlannedRun, str]]:
    """Run the lockstep groups of ``todo`` (:func:`lockstep_plan`) in this process, one after
    another (:mod:`fedhet.engine.lockstep`); records their outcomes and returns the other runs. Each
    run that trains alone where it would have joined a group says why in one line to ``notes``."""
    from fedhet.engine import LockstepGroup

    groups, alone = lockstep_plan(todo, options)
    for run, _ in alone:
        with append_log_text(run.run_dir / LOG_FILE) as log_file:
            log_file.write(NO_PARTNER + "\n")
        notes(f"{run.name}: {NO_PARTNER}")
    datasets = DatasetCache()
    for group in groups:
        lockstep = LockstepGroup()
        for run, state in group:
            view.update(run.name, RUNNING, note="lockstep, resumed" if state == RESUME else "lockstep")
        results = lockstep.run([lambda run=run, state=state: _run_in_process(run, state, view, datasets, lockstep,
                                                                             notes)
                                for run, state in group])
        for result in results:
            if not isinstance(result, RunOutcome):     # a run's thread interrupted: the sweep is
                raise result
            outcomes[result.run.name] = result
            show_outcome(view, result)
    grouped = {run.name for group in groups for run, _ in group}
    return [(run, state) for run, state in todo if run.name not in grouped]


def _finish_worker(run: PlannedRun, status: int) -> RunOutcome:
    summary = read_summary(run.run_dir)
    if status == 0 and summary is not None:
        return RunOutcome(run, DONE, summary=summary)
    tail = tail_of(run.run_dir / LOG_FILE)
    # "exit status N;" as a worker process of its own ends. A worker that died before answering was
    # killed (the kernel's out-of-memory killer, a signal): the machine's failure, status 1.
    what = f"exit status {status}" if status in (1, 2, 3) else \
        f"its worker process ended before answering (exit status {status})"
    return RunOutcome(run, FAILED, error=f"{what}; end of {run.run_dir / LOG_FILE}:\n{tail}",
                      exit_status=status if status in (1, 2, 3) else 1)


def _longest_first(todo: list[tuple[PlannedRun, str]]) -> list[tuple[PlannedRun, str]]:
    """The runs in the order parallel executors take them (:mod:`fedhet.lab.sweep.schedule`); a
    resumed run is priced by the rounds it has left."""
    costs = [estimated_cost(run.config, rounds_done(_latest_record(run.run_dir)) if state == RESUME else 0)
             for run, state in todo]
    return longest_first(todo, costs)


def _run_workers(todo: list[tuple[PlannedRun, str]], jobs: int, view: SweepProgress,
                 poll_seconds: float) -> list[RunOutcome]:
    """The runs on ``jobs`` long-lived worker processes (:mod:`fedhet.lab.sweep.worker_pool`)."""
    pending = list(todo)
    pool = WorkerPool(jobs)
    outcomes = []
    try:
        while pending or pool.running:
            while pending and pool.has_idle():
                run, state = pending.pop(0)
                pool.start(run, state)
                view.update(run.name, RUNNING, note="resumed" if state == RESUME else "")
            for run, status in pool.finished(poll_seconds):
                outcome = _finish_worker(run, status)
                outcomes.append(outcome)
                show_outcome(view, outcome)
            for run in pool.running:
                record = _latest_record(run.run_dir)
                if record is not None:
                    view.update(run.name, round=record["round"], accuracy=record.get("test_accuracy"))
            view.tick()
    finally:
        pool.close()
    return outcomes


def _write_manifest(plan: SweepPlan, outcomes: dict[str, RunOutcome], states: dict[str, tuple[str, bool]]) -> None:
    atomic_write_json(plan.out_dir / SWEEP_FILE, {
        "base_config": str(plan.base),
        "out_dir": str(plan.out_dir),
        "skipped_settings": [{"setting": s.name, "reason": s.reason} for s in plan.skipped],
        "runs": [{"name": run.name, "label": run.label, "assignments": dict(run.assignments), "seed": run.seed,
                  "status": outcomes[run.name].status if run.name in outcomes else states[run.name][0],
                  "final_accuracy": (outcomes[run.name].summary or {}).get("final_accuracy")
                  if run.name in outcomes else None}
                 for run in plan.runs],
    })


def run_sweep(plan: SweepPlan, *, jobs: Optional[int] = None, overwrite: bool = False,
              stream: TextIO = sys.stderr, live: Optional[bool] = None, poll_seconds: float = 0.5,
              options: Optional[SweepOptions] = None, lockstep: Optional[str] = None,
              notes: Optional[Notes] = None) -> SweepResult:
    """Run every run of ``plan`` that is not finished yet; returns each run's outcome.

    ``overwrite``: rerun from scratch the runs whose directories hold a different configuration
    (without it they are an error); finished runs of the planned configuration are always skipped.

    ``options``: how to execute (default: the plan's, from the base file's ``[sweep]`` table);
    ``executor = "ray"`` runs each run as a Ray task (:mod:`fedhet.lab.sweep.ray_executor`).
    ``lockstep`` (``off`` / ``on`` / ``auto``): replaces ``options.lockstep`` (docs/design.md, "Lockstep runs").
    ``jobs``: the local executor's parallel worker processes (default: ``options.jobs``, else one
    per usable core; 1 runs in this process).
    ``live``: redraw the progress block in place (default: when ``stream`` is a terminal).
    ``notes``: where the one-line notes on lockstep go (a run that trains alone where it would have
    joined a group, and why; default: printed with the progress view).
    """
    options = options if options is not None else plan.options
    if lockstep is not None:
        from fedhet.config import options_to_dict
        from fedhet.lab.sweep.options import sweep_options

        options = sweep_options(options_to_dict(options), {"lockstep": lockstep})
    jobs = jobs if jobs is not None else options.jobs
    if jobs is not None and jobs < 1:
        raise SweepError(f"--jobs must be at least 1, got {jobs}")
    if options.executor == "ray" and options.lockstep == "on":
        raise SweepError("sweep.lockstep = 'on' trains runs together in the sweep's process: it needs the "
                         "local executor, not ray")
    if options.executor == "ray":
        from fedhet.lab.sweep.ray_executor import import_ray

        import_ray()                  # a missing extra is a one-line error before anything is written
    # One sweep at a time per output directory (two would start the same runs twice).
    with DirectoryLock(plan.out_dir, what="sweep directory"):
        return _run_sweep_locked(plan, jobs=jobs, overwrite=overwrite, stream=stream, live=live,
                                 poll_seconds=poll_seconds, options=options, notes=notes)


def eta_kind(run: PlannedRun) -> tuple[str, ...]:
    """The kind by which the progress view's ETA prices a round of ``run`` (fedhet.lab.sweep.progress): what
    sets a round's local work and evaluation (data, model, clients, participation, local steps, evaluation
    cadence), then the variant (a method), then the folder (a claims protocol). Runs that share only the
    first entry (FedAU's three participation patterns, say) lend each other their pace until their own
    rounds have run."""
    config, client = run.config, run.config.client.options
    work = (config.data.name, repr(config.model), getattr(config.partition.options, "num_clients", None),
            config.participation.name, getattr(client, "batch_size", None), getattr(client, "epochs", None),
            getattr(client, "steps", None), getattr(client, "system", None), config.run.eval_every)
    return repr(work), run.label or "", run.run_dir.parent.name


def _run_sweep_locked(plan: SweepPlan, *, jobs: Optional[int], overwrite: bool, stream: TextIO,
                      live: Optional[bool], poll_seconds: float, options: SweepOptions,
                      notes: Optional[Notes]) -> SweepResult:
    states = check_states(plan, overwrite=overwrite)
    plan.out_dir.mkdir(parents=True, exist_ok=True)
    view = SweepProgress([(run.name, run.config.run.rounds) for run in plan.runs], stream, live=live,
                         kinds={run.name: eta_kind(run) for run in plan.runs})
    outcomes: dict[str, RunOutcome] = {}
    todo = []
    for run in plan.runs:
        state, replace = states[run.name]
        if state == FINISHED:
            summary = read_summary(run.run_dir)
            outcomes[run.name] = RunOutcome(run, SKIPPED, summary=summary)
            view.update(run.name, SKIPPED, accuracy=(summary or {}).get("final_accuracy"), note="finished before")
        else:
            _prepare(run, plan, replace)
            todo.append((run, state))
    _write_manifest(plan, outcomes, states)
    jobs = min(jobs or default_jobs(), max(1, len(todo)))
    try:
        if options.executor == "ray":
            if todo:
                from fedhet.lab.sweep.ray_executor import RaySweepExecutor

                for outcome in RaySweepExecutor(plan, options, view, poll_seconds).run(_longest_first(todo)):
                    outcomes[outcome.run.name] = outcome
        else:
            # Lockstep groups first, in this process, one group after another (their batches use the
            # device); the other runs as always.
            todo = _run_lockstep_groups(todo, options, view, outcomes, notes or view.message)
            jobs = min(jobs, max(1, len(todo)))
            if todo and jobs == 1:
                datasets = DatasetCache()         # each dataset loaded once for all the runs
                for run, state in todo:
                    view.update(run.name, RUNNING, note="resumed" if state == RESUME else "")
                    outcome = _run_in_process(run, state, view, datasets)
                    outcomes[run.name] = outcome
                    show_outcome(view, outcome)
            elif todo:
                for outcome in _run_workers(_longest_first(todo), jobs, view, poll_seconds):
                    outcomes[outcome.run.name] = outcome
    finally:
        view.close()
        _write_manifest(plan, outcomes, states)
    return SweepResult(plan, [outcomes[run.name] for run in plan.runs])
