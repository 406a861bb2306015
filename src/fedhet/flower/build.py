"""Building a run's pieces from a fedhet config, for the Flower apps: one place, so that a change in
how fedhet builds components touches this module only.

Both apps build the same objects ``fedhet run`` builds (:func:`fedhet.engine.federation.build_federation`,
``run.threads``, :func:`fedhet.engine.assembly.simulator_from_config` for the ServerApp and
:func:`fedhet.algorithms.build` for the nodes' solver), which is what makes a deployment reproduce the
simulation: the same data, partition, model and options from the same config and seed.
"""
from __future__ import annotations

import tomllib
from typing import TYPE_CHECKING

import torch

from fedhet.config import ExperimentConfig, config_to_toml, resolve_config
from fedhet.core.options import ConfigError
from fedhet.errors import FedhetError

if TYPE_CHECKING:
    from fedhet.engine import Federation

FLOWER_EXTRA = "pip install 'fedhet[flower]'"


class FlowerNotInstalledError(FedhetError, ImportError):
    """The Flower bridge was used without the ``flower`` extra."""


def require_flower() -> None:
    """Raise a one-line error naming the extra when ``flwr`` is missing."""
    try:
        import flwr  # noqa: F401
    except ImportError:
        raise FlowerNotInstalledError(f"the Flower bridge needs Flower; install it with {FLOWER_EXTRA}") from None


def config_text(config: ExperimentConfig) -> str:
    """The resolved config as the TOML text the apps carry in their run config."""
    return config_to_toml(config)


def config_from_text(text: str) -> ExperimentConfig:
    """Parse and validate the fedhet TOML carried by the run config."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError("fedhet-config", "<run config>", f"not valid TOML: {error}") from None
    return resolve_config(raw)


def check_deployable(config: ExperimentConfig) -> None:
    """Refuse the options that have no meaning in a Flower deployment (docs/flower.md, "What Flower
    cannot express"), each with a :class:`ConfigError` naming the key and what is allowed."""
    run = config.run
    if run.backend not in ("auto", "sequential"):
        raise ConfigError("run.backend", run.backend,
                          "in a Flower deployment each SuperNode trains its own clients one after another "
                          "(the sequential backend); allowed: auto, sequential")
    if run.store_mmap:
        raise ConfigError("run.store_mmap", True, "per-client state lives in each SuperNode's Context.state, "
                                                  "not in memory-mapped files; allowed: false")
    if run.trackers:
        raise ConfigError("run.trackers", list(run.trackers),
                          "the ServerApp writes metrics.jsonl to the run config's result-dir and runs no "
                          "tracker; allowed: []")
    if run.client_eval_every > 0:
        raise ConfigError("run.client_eval_every", run.client_eval_every,
                          "per-client evaluation needs every client's data in one process; allowed: 0")
    if run.stop_at_target:
        raise ConfigError("run.stop_at_target", True, "a Flower run always runs run.rounds rounds; allowed: false")
    if config.system is not None:
        raise ConfigError("system", "{...}", "a Flower deployment runs on real time, not on the virtual clock "
                                            "(docs/system.md); remove the [system] section")


def build_federation(config: ExperimentConfig) -> Federation:
    """Device, torch threads (``run.threads``, one by default: the same reduction order as
    ``fedhet run``) and the federation (data, partition, model) of ``config``."""
    from fedhet.engine import build_federation as build, configure_threads, resolve_device

    device = resolve_device(config.run.device)
    configure_threads(config.run.threads, device)
    return build(config, device)


def storage_dtype(config: ExperimentConfig) -> torch.dtype:
    """The torch dtype per-client rows are stored in (:func:`fedhet.engine.assembly.storage_dtype_name`)."""
    from fedhet.engine import storage_dtype_name

    return getattr(torch, storage_dtype_name(config.run))
