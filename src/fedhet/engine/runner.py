"""A run's lifecycle: ``fedhet run`` and ``fedhet run --resume`` from a configuration to ``summary.json``.

::

    lock the run directory; check or clear it; device and threads; federation; resource check
    handle = RunHandle(...)            # the Simulator of the config, its backend, evaluation
    new run: config.toml, data files, partition.csv, a round-0 checkpoint | resume: load, repair metrics
    while rounds remain: record = handle.run_round(); callbacks (metrics.jsonl, checkpoint, progress, stop)
    close the backend; plots; summary.json last (it marks the run finished)

The pieces have their own modules: :mod:`fedhet.engine.device` (device and threads),
:mod:`fedhet.engine.federation` (the data side), :mod:`fedhet.engine.assembly` (config ->
Simulator), :mod:`fedhet.engine.backend_choice` (``run.backend``), :mod:`fedhet.engine.run_handle`
(one round and its evaluation), :mod:`fedhet.engine.run_plots` (the partition and participation
files). Every stage's state is explicit and lives in the :class:`RunHandle`'s simulator; the checkpoint
holds all of it, and every random stream is keyed by (seed, round, client), so a resumed run
continues bit for bit.
"""
from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional

from fedhet.config.schema import ExperimentConfig, config_to_toml, load_config, parse_override
from fedhet.core.io import atomic_write_json, atomic_write_text
from fedhet.core.resume_inputs import resuming
from fedhet.engine import checkpoint as ckpt, run_plots
from fedhet.engine.callbacks import (
    Callback,
    CheckpointCallback,
    MetricsWriter,
    ProgressBar,
    TargetAccuracy,
    rewrite_metrics,
    scan_metrics,
    set_aside_bad_lines,
)
from fedhet.engine.device import configure_threads, cpu_capability, resolve_device
from fedhet.engine.empty_rounds import EmptyRoundsWarning
from fedhet.engine.federation import build_federation
from fedhet.engine.fingerprint import ConfigChangedError, check_fingerprint, check_resumable_overrides
from fedhet.engine.preflight import check_run_resources, write_data_files
from fedhet.engine.results import RunExistsError, RunResult
from fedhet.engine.run_handle import RunHandle, resume_command
from fedhet.engine.rundir import STORES_DIR, clear_run_directory, refuse_linked_folders, remove_stale_temporaries
from fedhet.engine.rundir_lock import DirectoryLock
from fedhet.engine.tracking import check_trackers_installed, tracking_callbacks, tracking_folders

if TYPE_CHECKING:
    from fedhet.engine.dataset_cache import DatasetCache
    from fedhet.engine.lockstep import LockstepGroup

# Importable from here, where ``fedhet run``'s users (the command line, benchmarks) find them.
__all__ = ["RunHandle", "build_federation", "configure_threads", "resolve_device", "resume_command",
           "resume_run", "run_experiment"]

logger = logging.getLogger(__name__)


def _messages(log: Optional[Callable[[str], None]]) -> Callable[[str], None]:
    """Where the run's messages go: the ``fedhet.engine.runner`` logger (INFO) always, and ``log`` too
    when a caller passed one (kept for callers that collect messages themselves)."""
    def emit(message: str) -> None:
        # A message the caller should act on ("warning: ...") stays visible under --quiet.
        if message.startswith("warning:"):
            logger.warning(message[len("warning:"):].strip())
        else:
            logger.info(message)
        if log is not None:
            log(message)
    return emit


def _default_callbacks(config: ExperimentConfig, run_dir: Path) -> list[Callback]:
    callbacks: list[Callback] = [MetricsWriter(run_dir / "metrics.jsonl"),
                                 CheckpointCallback(config.run.checkpoint_every), EmptyRoundsWarning()]
    if config.run.stop_at_target and config.run.target_accuracy is not None:
        callbacks.append(TargetAccuracy(config.run.target_accuracy))
    if config.run.progress:
        callbacks.append(ProgressBar())
    return callbacks


def run_experiment(config: ExperimentConfig, run_dir: str | Path | None = None, *, resume: bool = False,
                   overwrite: bool = False, callbacks: Iterable[Callback] = (),
                   log: Optional[Callable[[str], None]] = None,
                   datasets: Optional[DatasetCache] = None, lockstep: Optional[LockstepGroup] = None) -> RunResult:
    """Run (or resume) an experiment and return its summary.

    The result (:class:`fedhet.engine.results.RunResult`) is the summary mapping, with the run's
    per-round ``history`` and its ``run_dir`` as attributes. ``datasets``: loaded datasets to reuse
    across the runs of one process (a sweep worker's :class:`~fedhet.engine.dataset_cache.DatasetCache`);
    the numbers are the same without it. ``lockstep``: the group whose batches train this run's
    rounds (:mod:`fedhet.engine.lockstep`; the same numbers to rounding).

    Messages (the backend chosen, a resume) go to the ``fedhet.engine.runner`` logger at INFO level,
    and also to ``log`` when given.

    ``run_dir`` defaults to ``run.out_dir / run.name``. The run holds the directory's lock
    (:mod:`fedhet.engine.rundir_lock`) until it returns. A new run refuses a run directory that
    holds a checkpoint unless ``overwrite``; a new run (overwriting or not) first removes fedhet's
    own files of any earlier run there, and nothing else (:mod:`fedhet.engine.rundir`). A resumed
    run refuses a configuration that differs from its checkpoint's (:mod:`fedhet.engine.fingerprint`).
    Writes ``config.toml``, ``metrics.jsonl``, ``summary.json``, ``checkpoint.pt``,
    ``partition.csv/png``, ``participation.pt/png`` there, each atomically; the plots (``.png``)
    after the last round, so that no plotting delays round 1.
    """
    log = _messages(log)
    check_trackers_installed(config.run.trackers)   # a missing tracker package stops before any work
    run_dir = Path(run_dir) if run_dir is not None else Path(config.run.out_dir) / config.run.name
    with DirectoryLock(run_dir):
        summary = _run_locked(config, run_dir, resume=resume, overwrite=overwrite, callbacks=callbacks, log=log,
                              datasets=datasets, lockstep=lockstep)
    return RunResult(summary, run_dir)


def _run_locked(config: ExperimentConfig, run_dir: Path, *, resume: bool, overwrite: bool,
                callbacks: Iterable[Callback], log: Callable[[str], None],
                datasets: Optional[DatasetCache] = None, lockstep: Optional[LockstepGroup] = None) -> dict[str, Any]:
    saved: dict[str, Any] = {}
    refuse_linked_folders(run_dir, (STORES_DIR,) + tracking_folders())
    if resume:
        saved = ckpt.load_checkpoint(run_dir, log=log)
        check_fingerprint(saved.get("config_fingerprint"), config, str(run_dir))
        done = int(saved["simulator"]["next_round"])
        if config.run.rounds < done:
            raise ConfigChangedError(f"{run_dir}: run.rounds = {config.run.rounds} but the checkpoint is "
                                     f"after round {done}; run.rounds may only grow past the rounds done")
    else:
        if ckpt.has_checkpoint(run_dir) and not overwrite:
            raise RunExistsError(run_dir)
        clear_run_directory(run_dir)
    remove_stale_temporaries(run_dir)
    device = resolve_device(config.run.device)
    threads = configure_threads(config.run.threads, device)
    logger.debug("device %s, %d torch thread(s), run directory %s", device, threads, run_dir)
    federation = build_federation(config, device, datasets)
    check_run_resources(config, federation.task, run_dir, log)
    # A resumed run's trace and profiles come from its checkpoint, not from their files (which
    # may have changed or gone since): fedhet.core.resume_inputs.
    with resuming(saved["simulator"]) if resume else contextlib.nullcontext():
        handle = RunHandle(config, run_dir, federation, log, lockstep)
    metrics_path = run_dir / "metrics.jsonl"
    if resume:
        handle.load_state(saved)
        scan = scan_metrics(metrics_path)
        if scan.bad_lines:
            aside = set_aside_bad_lines(metrics_path, scan)
            log(f"warning: {scan.describe_bad(metrics_path)}; they are kept in {aside}")
        # Records after the checkpoint are recomputed (identically) by the rounds that follow.
        handle.records = [r for r in scan.records if r["round"] <= handle.next_round]
        lost = _lost_rounds(handle.records, handle.next_round, config.run.eval_every)
        if lost:
            # A record damaged before the checkpoint cannot be recomputed from it: name the lost rounds.
            log(f"warning: {metrics_path} has no record of round(s) {', '.join(map(str, lost[:10]))} before the "
                f"checkpoint (a damaged line); the checkpoint cannot recompute them, so they stay missing: "
                f"the model and every later round are unaffected")
        rewrite_metrics(metrics_path, handle.records)
        # Records a changed run.rounds (fedhet run --resume DIR --set run.rounds=N) for later resumes.
        atomic_write_text(run_dir / "config.toml", config_to_toml(config))
        if handle.next_round >= config.run.rounds:
            # Said plainly: the summary that follows is the earlier run's, not new work.
            log(f"{run_dir} finished all {config.run.rounds} rounds before; nothing ran (to train further, "
                f"raise run.rounds, e.g. --set run.rounds={2 * config.run.rounds})")
        else:
            log(f"resuming {run_dir} after round {handle.next_round}")
    else:
        atomic_write_text(run_dir / "config.toml", config_to_toml(config))
        write_data_files(run_dir, config, federation.bundle)
        rewrite_metrics(metrics_path, [])
        run_plots.write_partition_report(handle)
        # A round-0 checkpoint: a run killed before its first periodic checkpoint still resumes.
        handle.save_checkpoint()
    # Trackers after the checkpoint callback: a round reaches them once a checkpoint covers it.
    all_callbacks = (_default_callbacks(config, run_dir) + tracking_callbacks(config, run_dir, resume)
                     + list(callbacks))
    for callback in all_callbacks:
        callback.on_run_start(handle)
    stop = False
    try:
        while handle.next_round < config.run.rounds and not stop:
            record = handle.run_round()
            if "test_accuracy" in record:
                handle.records.append(record)
            for callback in all_callbacks:
                stop = callback.on_round_end(handle, record) or stop
    finally:
        # Worker processes of a multi-process backend end with the run, whatever ended it.
        handle.backend.close()
    if stop:
        handle.save_checkpoint()
    summary = handle.summary()
    # The pair that ran is recorded beside its name (algorithm = X always runs X's pair: fedhet.config.schema).
    summary.update({"name": config.run.name, "algorithm": config.algorithm or
                    f"{config.client.name}+{config.server.name}", "client": config.client.name,
                    "server": config.server.name, "backend": handle.backend.name,
                    "device": str(device), "cpu_capability": cpu_capability(),
                    "stopped_early": stop})
    # summary.json marks the run finished (sweeps, tune and claims skip it), so it is written after
    # every other file of the run: a full disk or a kill before it leaves a run that resumes and
    # writes them. The trackers end after it: they upload it.
    run_plots.write_partition_plot(handle)
    run_plots.write_participation(handle)
    atomic_write_json(run_dir / "summary.json", summary)
    for callback in all_callbacks:
        callback.on_run_end(handle, summary)
    return summary


def _lost_rounds(records: list[dict[str, Any]], rounds_done: int, eval_every: int) -> list[int]:
    """Rounds up to ``rounds_done`` that fall on ``eval_every`` and have no record (evaluated rounds
    off that period, the last round's and per-client rounds', are not predicted here)."""
    present = {int(r["round"]) for r in records}
    return [r for r in range(eval_every, rounds_done + 1, eval_every) if r not in present]


def resume_run(run_dir: str | Path, *, callbacks: Iterable[Callback] = (),
               log: Optional[Callable[[str], None]] = None, sets: Iterable[str] = (),
               datasets: Optional[DatasetCache] = None, lockstep: Optional[LockstepGroup] = None) -> RunResult:
    """Continue an interrupted run from its directory (its saved ``config.toml`` and checkpoint).

    ``sets`` (``"run.rounds=200"``, ...) may change only the keys of
    :data:`fedhet.engine.fingerprint.RESUMABLE_KEYS`; the change is saved in ``config.toml``."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.toml").is_file():
        raise FileNotFoundError(f"{run_dir} is not a fedhet run directory (no config.toml)")
    sets = list(sets)
    check_resumable_overrides([parse_override(item)[0] for item in sets])
    with resuming():      # the configuration's checks do not read files the checkpoint replaces
        config = load_config(run_dir / "config.toml", sets)
    return run_experiment(config, run_dir, resume=True, callbacks=callbacks, log=log, datasets=datasets,
                          lockstep=lockstep)
