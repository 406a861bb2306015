"""A fingerprint of a run's resolved configuration, saved in its checkpoint and checked on resume.

A resumed run must compute what the interrupted run would have computed, so ``--resume`` refuses a
``config.toml`` whose resolved values differ from those the checkpoint was written with, and lists
the differing keys. The keys of :data:`RESUMABLE_KEYS` are left out of the fingerprint: they change
neither a round's numbers nor the records' meaning, and ``fedhet run --resume DIR --set KEY=VALUE``
may change them (docs/reliability.md).
"""
from __future__ import annotations

import hashlib
import json
import math
from typing import Any, Mapping

from fedhet.config.schema import ExperimentConfig
from fedhet.errors import FedhetError

# run.rounds: more (or fewer, not below the rounds done) rounds continue the same trajectory.
# run.progress, run.threads: display and torch intra-op threads (one per process by default; the
# kernels fedhet uses give the same bits). run.out_dir: where the directory is, not what it holds.
# run.backend and the Ray backend's resources: where the clients run, not what they compute (every
# backend gives the sequential backend's numbers, bitwise for processes and ray, to rounding for
# vectorized), so a run started on a laptop may continue on a Ray cluster.
RESUMABLE_KEYS = ("run.rounds", "run.progress", "run.threads", "run.out_dir", "run.backend", "run.ray_address",
                  "run.ray_actors", "run.ray_cpus_per_actor", "run.ray_gpus_per_actor", "run.ray_retries",
                  "run.ray_start_timeout", "run.ray_call_timeout")


class ConfigChangedError(FedhetError, ValueError):
    """A resume whose configuration differs from the checkpoint's in keys that change results."""


def _canonical(value: Any) -> Any:
    # JSON has no inf/nan; keep them distinguishable from strings and from each other.
    if isinstance(value, float) and not math.isfinite(value):
        return f"<float {value!r}>"
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    return value


def user_implementations(config: ExperimentConfig) -> dict[str, str]:
    """``{"implementation.<section>": "<module>.<factory>"}`` for each component of ``config`` that
    fedhet does not define: one registered from user code, a new name or a ``replace=True`` of a
    built-in. A resume in a process where that name means another factory (the built-in, because the
    user's module was not imported) would mix two algorithms under one name; with these values in the
    fingerprint it is refused, naming the factory. Built-ins are left out, so their runs' fingerprints
    do not depend on where fedhet defines its factories."""
    from fedhet.config.schema import COMPONENT_SECTIONS

    found = {}
    for section, (registry, _) in COMPONENT_SECTIONS.items():
        name = getattr(config, section).name
        if name not in registry:
            continue
        factory = registry.get(name).factory
        module = str(getattr(factory, "__module__", "") or "")
        if module.split(".")[0] != "fedhet":
            qualified = getattr(factory, "__qualname__", getattr(factory, "__name__", repr(factory)))
            found[f"implementation.{section}"] = f"{module}.{qualified}"
    return found


def fingerprinted_values(config: ExperimentConfig) -> dict[str, Any]:
    """The flat resolved configuration without :data:`RESUMABLE_KEYS`, as JSON-ready values, and the
    user-defined implementations (:func:`user_implementations`)."""
    values = {key: _canonical(value) for key, value in sorted(config.to_flat_dict().items())
              if key not in RESUMABLE_KEYS}
    values.update(user_implementations(config))
    return values


def config_fingerprint(config: ExperimentConfig) -> dict[str, Any]:
    """What the checkpoint records: ``{"sha256": ..., "values": {key: value}}`` (the values let a
    refused resume name the differing keys)."""
    values = fingerprinted_values(config)
    text = json.dumps(values, sort_keys=True, default=str)
    return {"sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(), "values": json.loads(text)}


def check_fingerprint(saved: Mapping[str, Any] | None, config: ExperimentConfig, where: str) -> None:
    """Raise :class:`ConfigChangedError` listing the keys whose values differ from ``saved``."""
    current = config_fingerprint(config)
    if saved is None or saved.get("sha256") == current["sha256"]:
        return
    old, new = dict(saved.get("values", {})), current["values"]
    # A checkpoint written before a key became resumable has it among its values: not a difference.
    keys = sorted(key for key in set(old) | set(new)
                  if key not in RESUMABLE_KEYS and old.get(key, "<unset>") != new.get(key, "<unset>"))
    if not keys and old:
        return
    implementations = [key for key in keys if key.startswith("implementation.")]
    if implementations:
        key = implementations[0]
        section = key.split(".", 1)[1]
        name = new.get(f"{section}.name", old.get(f"{section}.name"))
        builtin = "fedhet's built-in"
        raise ConfigChangedError(
            f"{where}: {section}.name = {name!r} was {old.get(key, builtin)} when the run started, and here it is "
            f"{new.get(key, builtin)}; resume it where the same "
            "implementation is registered (import the module that registers it, then call "
            "fedhet.engine.runner.resume_run), or start afresh with --overwrite")
    shown = ", ".join(f"{key} ({old.get(key, '<unset>')!r} -> {new.get(key, '<unset>')!r})" for key in keys[:8])
    more = f" and {len(keys) - 8} more" if len(keys) > 8 else ""
    raise ConfigChangedError(
        f"{where}: config.toml differs from the configuration its checkpoint was written with, in "
        f"{shown or 'values not listed'}{more}; restore it, or start afresh with --overwrite. "
        f"Only {', '.join(RESUMABLE_KEYS)} may change on resume (fedhet run --resume DIR --set run.rounds=N)")


def check_resumable_overrides(keys: list[str]) -> None:
    """Only :data:`RESUMABLE_KEYS` may be given with ``--resume``."""
    bad = [key for key in keys if key not in RESUMABLE_KEYS]
    if bad:
        raise ConfigChangedError(f"--resume --set may change only {', '.join(RESUMABLE_KEYS)}; not "
                                 f"{', '.join(bad)} (a different configuration is a new run)")
