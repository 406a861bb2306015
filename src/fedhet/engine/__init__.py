"""The engine: one run from its configuration to its run directory (simulator, runner, callbacks,
checkpoints, run directories, the tracking callback).

This package is the engine's entrance: ``__all__`` names what the lab (``fedhet.lab``) and the library's
edges (``fedhet.cli``, ``fedhet.flower``, ``fedhet.testing``, the ``fedhet`` facade) use from the engine,
and they import it from here, not from the engine's modules. The Ray backend's reachability check is
here too: the lab reaches a cluster only as the engine does. Modules inside the library import each
other directly. Each name is imported on first use (PEP 562), so importing ``fedhet.engine`` imports
none of its modules and opens no import cycle (docs/design.md, "Layers";
tests/core/test_core_layering.py checks that every name is defined and used from outside).
"""
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # The names of _EXPORTS below, for type checkers; at run time __getattr__ imports them on first use.
    from fedhet.backends.ray_backend import RayClusterUnreachableError, check_reachable
    from fedhet.engine.assembly import simulator_from_config, storage_dtype_name
    from fedhet.engine.callbacks import Callback, read_metrics, scan_metrics
    from fedhet.engine.checkpoint import CHECKPOINT_NAME, PREVIOUS_NAME, CheckpointError, has_checkpoint
    from fedhet.engine.dataset_cache import DatasetCache
    from fedhet.engine.determinism import deterministic_kernels
    from fedhet.engine.device import configure_threads, resolve_device
    from fedhet.engine.federation import Federation, build_federation
    from fedhet.engine.fingerprint import config_fingerprint
    from fedhet.engine.lockstep import LockstepGroup
    from fedhet.engine.preflight import check_run_resources
    from fedhet.engine.results import RunExistsError
    from fedhet.engine.run_handle import DIVERGED_FILE
    from fedhet.engine.rundir import clear_run_directory
    from fedhet.engine.rundir_lock import LOCK_NAME, DirectoryLock, RunDirectoryInUseError
    from fedhet.engine.runner import resume_command, resume_run, run_experiment
    from fedhet.engine.simulator import Simulator
    from fedhet.engine.summary import CLIENT_RECORD_KEYS, CLIENT_SUMMARY_KEYS, last_fraction_mean, rounds_to_target
    from fedhet.engine.tracking import sweep_viewer_lines

# name -> the module that defines it (the same pairs as the imports above).
_EXPORTS = {
    "check_reachable": "fedhet.backends.ray_backend",
    "RayClusterUnreachableError": "fedhet.backends.ray_backend",
    "simulator_from_config": "fedhet.engine.assembly",
    "storage_dtype_name": "fedhet.engine.assembly",
    "Callback": "fedhet.engine.callbacks",
    "read_metrics": "fedhet.engine.callbacks",
    "scan_metrics": "fedhet.engine.callbacks",
    "CHECKPOINT_NAME": "fedhet.engine.checkpoint",
    "CheckpointError": "fedhet.engine.checkpoint",
    "has_checkpoint": "fedhet.engine.checkpoint",
    "PREVIOUS_NAME": "fedhet.engine.checkpoint",
    "DatasetCache": "fedhet.engine.dataset_cache",
    "deterministic_kernels": "fedhet.engine.determinism",
    "configure_threads": "fedhet.engine.device",
    "resolve_device": "fedhet.engine.device",
    "build_federation": "fedhet.engine.federation",
    "Federation": "fedhet.engine.federation",
    "LockstepGroup": "fedhet.engine.lockstep",
    "config_fingerprint": "fedhet.engine.fingerprint",
    "check_run_resources": "fedhet.engine.preflight",
    "RunExistsError": "fedhet.engine.results",
    "DIVERGED_FILE": "fedhet.engine.run_handle",
    "clear_run_directory": "fedhet.engine.rundir",
    "DirectoryLock": "fedhet.engine.rundir_lock",
    "LOCK_NAME": "fedhet.engine.rundir_lock",
    "RunDirectoryInUseError": "fedhet.engine.rundir_lock",
    "resume_command": "fedhet.engine.runner",
    "resume_run": "fedhet.engine.runner",
    "run_experiment": "fedhet.engine.runner",
    "Simulator": "fedhet.engine.simulator",
    "CLIENT_RECORD_KEYS": "fedhet.engine.summary",
    "CLIENT_SUMMARY_KEYS": "fedhet.engine.summary",
    "last_fraction_mean": "fedhet.engine.summary",
    "rounds_to_target": "fedhet.engine.summary",
    "sweep_viewer_lines": "fedhet.engine.tracking",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["check_reachable", "RayClusterUnreachableError", "simulator_from_config", "storage_dtype_name", "Callback",
           "read_metrics", "scan_metrics", "CHECKPOINT_NAME", "CheckpointError", "has_checkpoint", "PREVIOUS_NAME",
           "DatasetCache", "deterministic_kernels", "configure_threads", "resolve_device", "build_federation",
           "Federation", "LockstepGroup", "config_fingerprint", "check_run_resources", "RunExistsError", "DIVERGED_FILE",
           "clear_run_directory", "DirectoryLock", "LOCK_NAME", "RunDirectoryInUseError", "resume_command",
           "resume_run", "run_experiment", "Simulator", "CLIENT_RECORD_KEYS", "CLIENT_SUMMARY_KEYS",
           "last_fraction_mean", "rounds_to_target", "sweep_viewer_lines"]
