"""The experiment configuration: TOML file + ``--set section.key=value`` overrides -> typed, frozen.

Sections::

    [run]            RunOptions (fixed keys)
    [data]           name = "fmnist" | "mnist" | "synthetic" | ...   + that dataset's options
    [partition]      name = "iid" | "dirichlet" | "shards" | ...     + that partitioner's options
    [model]          name = "mlp" | "cnn" | ...                       + that model's options
    [participation]  name = "uniform" | ...                           + that process's options
    [client]         name = "sgd" | "fedprox" | ...                   + that solver's options
    [server]         name = "fedavg" | "fedaware" | ...               + that method's options
    [system]         optional: the virtual clock (SystemOptions; docs/system.md)
    [asynchronous]   optional: FedBuff / FedAsync on the clock (AsyncOptions; docs/async.md)

and optionally a top-level ``algorithm = "scaffold"`` that picks the client and server pair of a
named algorithm. ``algorithm = X`` means the same wherever it is written (docs/design.md,
"`algorithm = X`"):

- in one mapping (a file, or a file with its overrides applied) it selects X's ``client.name`` and
  ``server.name``; a ``client.name`` / ``server.name`` in the same mapping must be X's own, and a
  different one is refused (:func:`resolve_config`), never silently preferred;
- as an override (``--set algorithm=X``, a ``load_config`` override, a sweep's ``--grid``, variant
  or tuning value) it replaces the pair the file names: the file's ``client.name`` and
  ``server.name`` are dropped unless the same overrides name them too (:func:`apply_overrides`).

A ``[sweep]`` table says how
``fedhet sweep`` executes the runs (:mod:`fedhet.lab.sweep.options`); a run ignores it. Each component's options are
validated against its registered dataclass: unknown keys, wrong types and out-of-range values raise
:class:`ConfigError` naming the key, the value and what is allowed.
"""
from __future__ import annotations

import dataclasses
import math
import re
import tomllib
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from fedhet.config.asynchronous import check_asynchronous
from fedhet.config.client_eval import check_client_eval
from fedhet.config.system import check_system
from fedhet.core.options import ConfigError, OverrideText, build_options, option, options_to_dict
from fedhet.core.registry import (
    ALGORITHMS,
    CLIENT_SOLVERS,
    DATASETS,
    MODELS,
    PARTICIPATION,
    PARTITIONERS,
    SERVERS,
    Registry,
)
from fedhet.names import check_name
from fedhet.system.asynchronous import AsyncOptions
from fedhet.system.options import SystemOptions
from fedhet.tracking.names import check_tracking_options


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """The ``[run]`` section: how the experiment runs (not what it computes, except seed/rounds)."""

    name: str = option("run", help="run name; the run directory is out_dir/name")
    rounds: int = option(100, ge=1, symbol="T", help="communication rounds")
    seed: int = option(1, ge=0, help="run seed; every random stream is derived from it")
    eval_every: int = option(1, ge=1, help="evaluate on the test set every this many rounds (and at the last round)")
    out_dir: str = option("runs", help="directory that holds run directories")
    device: str = option("auto", help="'auto' (a CUDA GPU when present, else CPU), 'cpu', 'cuda', 'cuda:N' or 'mps'")
    backend: str = option("auto", choices=("auto", "sequential", "vectorized", "processes", "ray"),
                          help="execution backend; 'auto': vectorized on a GPU, processes on a CPU with "
                               "two or more usable cores and a model big enough, else sequential (the run logs the "
                               "choice and why); 'ray' (never chosen by auto): Ray actors on this machine or a "
                               "cluster (run.ray_*, docs/ray.md); the numbers are the same (to rounding for "
                               "vectorized)")
    threads: Optional[int] = option(None, ge=1, help="CPUs the run may keep busy (capped at those this process may "
                                                     "use): this process's torch threads and the processes backend's "
                                                     "process count; default: one torch thread, and the processes "
                                                     "backend uses every usable CPU")
    ray_address: Optional[str] = option(None, help="run.backend = 'ray': the Ray cluster to join, 'auto' or "
                                                   "'host:port' of its head; default: start a private local Ray "
                                                   "for the run and stop it at the end")
    ray_actors: Optional[int] = option(None, ge=1, help="run.backend = 'ray': worker actors; default: as many as "
                                                       "the cluster's CPUs (and GPUs) allow at the per-actor "
                                                       "resources (the local Ray gets this process's usable CPUs, "
                                                       "capped by run.threads)")
    ray_cpus_per_actor: float = option(1.0, gt=0, help="run.backend = 'ray': CPUs each actor reserves; it runs "
                                                     "that many torch threads (at least one; bitwise the sequential "
                                                     "numbers with one)")
    ray_gpus_per_actor: float = option(0.0, ge=0, help="run.backend = 'ray': GPUs (fractions allowed) each actor "
                                                     "reserves; needed when run.device is a GPU")
    ray_retries: int = option(3, ge=0, help="run.backend = 'ray': times a client whose actor died is run again on "
                                           "another actor within a round before the run stops")
    ray_start_timeout: float = option(120.0, gt=0, help="run.backend = 'ray': seconds to wait for an actor (or a "
                                                        "replacement of a lost one) to start before the run stops "
                                                        "saying the cluster lacks the resources")
    ray_call_timeout: float = option(600.0, gt=0, help="run.backend = 'ray': seconds an actor may hold a client's "
                                                       "training without returning any result before it is treated "
                                                       "as lost (a stopped or hung process): it is killed and its "
                                                       "clients run again on another actor, the same numbers; "
                                                       "raise it for clients that train longer")
    dtype: str = option("float32", choices=("float32", "float64"), help="parameter and compute dtype")
    eval_batch_size: int = option(2000, ge=1, help="most examples per forward pass of an evaluation (test set, "
                                                   "per-client); on a CPU fewer, so that the model's largest "
                                                   "activation stays within 8 MiB")
    checkpoint_every: int = option(10, ge=1, help="write the checkpoint every this many rounds (and at the end)")
    target_accuracy: Optional[float] = option(None, gt=0, le=1,
                                              help="accuracy whose first reaching round is reported (rounds to target)")
    stop_at_target: bool = option(False, help="stop the run once target_accuracy is reached")
    trackers: tuple[str, ...] = option(default_factory=tuple,
                                       help="experiment trackers that also receive the config, every evaluated "
                                            "round, the summary and the plots: tensorboard, mlflow, wandb "
                                            "(pip install 'fedhet[tracking]'; see docs/tracking.md)")
    tracker_project: Optional[str] = option(None, help="MLflow experiment / W&B project; default: the sweep's "
                                                       "name for a sweep run, else 'fedhet'")
    mlflow_uri: Optional[str] = option(None, help="MLflow tracking URI; default: a local SQLite store, "
                                                  "mlflow.db beside the run directory")
    wandb_mode: str = option("offline", choices=("offline", "online"),
                             help="W&B mode; 'offline' writes only the run directory's wandb folder")
    store_dtype: str = option("auto", choices=("auto", "float32", "bfloat16", "float16", "float64"),
                              help="storage dtype of per-client memories (momenta, control variates, ...); "
                                   "'auto' = run.dtype")
    store_mmap: bool = option(False, help="keep per-client memories in memory-mapped files in the run directory")
    progress: bool = option(True, help="show progress: a bar on a terminal, else a line every 10% of the rounds")
    resource_check: str = option("error", choices=("error", "warn", "off"),
                                 help="memory and disk estimated before the run (stores, Gram matrix, participation "
                                      "log): 'error' refuses a run that needs more than the machine has, 'warn' "
                                      "only warns, 'off' skips the estimate")
    client_eval_every: int = option(0, ge=0, help="evaluate the global model on every client's own data every this "
                                               "many rounds (and at the last round; those rounds are also evaluated "
                                               "on the test set); 0 (default): off")
    global_train_loss_every: int = option(0, ge=0, help="record global_train_loss and global_train_accuracy: one "
                                                       "pass of the global model over the clients' whole "
                                                       "training set (FedAU's tuning criterion, its Appendix "
                                                       "C.4) every this many rounds and at the last round "
                                                       "(those rounds are also evaluated on the test set); "
                                                       "0 (default): off")
    client_eval_data: str = option("holdout", choices=("holdout", "train"),
                                   help="per-client evaluation data: 'holdout' (the slice set by "
                                        "data.client_test_fraction) or 'train' (the client's training data)")

    def validate(self, section: str) -> None:
        check_tracking_options(self, section)
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?|mps", self.device):
            raise ConfigError(f"{section}.device", self.device, "allowed: auto, cpu, cuda, cuda:N, mps")
        if self.ray_address is not None and not re.fullmatch(r"auto|(ray://)?[^\s:/]+:\d{1,5}", self.ray_address):
            raise ConfigError(f"{section}.ray_address", self.ray_address,
                              "allowed: 'auto' or the head's 'host:port' (e.g. '127.0.0.1:6379'), or unset for a local Ray")

        check_name(f"{section}.name", self.name)


@dataclasses.dataclass(frozen=True)
class Component:
    """A chosen component: its registered name and validated options."""

    name: str
    options: Any


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
    run: RunOptions
    data: Component
    partition: Component
    model: Component
    participation: Component
    client: Component
    server: Component
    algorithm: Optional[str] = None
    # The virtual clock's [system] section; None (no section) = no clock, as before it existed.
    system: Optional[SystemOptions] = None
    # [asynchronous]: FedBuff / FedAsync on the clock (docs/async.md); None = synchronous rounds.
    asynchronous: Optional[AsyncOptions] = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.algorithm is not None:
            out["algorithm"] = self.algorithm
        out["run"] = options_to_dict(self.run)
        for section in COMPONENT_SECTIONS:
            component = getattr(self, section)
            out[section] = {"name": component.name, **options_to_dict(component.options)}
        if self.system is not None:
            out["system"] = options_to_dict(self.system)
        if self.asynchronous is not None:
            out["asynchronous"] = options_to_dict(self.asynchronous)
        return out

    def to_flat_dict(self) -> dict[str, Any]:
        """:meth:`to_dict` with dotted keys (``"client.learning_rate"``), as ``--set`` writes them."""
        flat: dict[str, Any] = {}
        for section, values in self.to_dict().items():
            if isinstance(values, dict):
                flat.update({f"{section}.{key}": value for key, value in values.items()})
            else:
                flat[section] = values
        return flat

    def with_overrides(self, overrides: Mapping[str, Any]) -> "ExperimentConfig":
        return resolve_config(apply_overrides(self.to_dict(), overrides))


COMPONENT_SECTIONS: dict[str, tuple[Registry, str]] = {
    "data": (DATASETS, "fmnist"),
    "partition": (PARTITIONERS, "iid"),
    "model": (MODELS, "mlp"),
    "participation": (PARTICIPATION, "uniform"),
    "client": (CLIENT_SOLVERS, "sgd"),
    "server": (SERVERS, "fedavg"),
}
SECTIONS = ("algorithm", "run", *COMPONENT_SECTIONS, "system", "asynchronous")


def load_components() -> None:
    """Import :mod:`fedhet.components`, which registers every component in the registries of
    :mod:`fedhet.core.registry`; resolving a configuration looks names up there."""
    import fedhet.components  # noqa: F401  (registers every component)


def resolve_config(raw: Mapping[str, Any]) -> ExperimentConfig:
    """Validate a raw nested mapping (parsed TOML plus overrides) into an :class:`ExperimentConfig`."""
    load_components()
    for key, value in raw.items():
        if key == "sweep":
            # How `fedhet sweep` executes the runs (fedhet.lab.sweep.options), not what a run computes.
            continue
        if key not in SECTIONS:
            raise ConfigError(key, value if not isinstance(value, dict) else "{...}",
                              "unknown section; allowed: " + ", ".join(SECTIONS))
        if key != "algorithm" and not isinstance(value, Mapping):
            raise ConfigError(key, value, "expected a table ([" + key + "])")
    algorithm = raw.get("algorithm")
    pair = None
    if algorithm is not None:
        algorithm = _name_text("algorithm", algorithm)
        if algorithm not in ALGORITHMS:
            raise ConfigError("algorithm", algorithm, "allowed: " + ", ".join(sorted(ALGORITHMS)))
        pair = {"client": ALGORITHMS[algorithm].client, "server": ALGORITHMS[algorithm].server}
    run = build_options(RunOptions, dict(raw.get("run", {})), section="run")
    components = {}
    for section, (registry, default_name) in COMPONENT_SECTIONS.items():
        values = dict(raw.get(section, {}))
        fallback = pair.get(section, default_name) if pair else default_name
        name = _name_text(f"{section}.name", values.pop("name", fallback))
        # pair is set exactly when algorithm is (the second test narrows the name's type).
        if pair and algorithm is not None and section in pair and name != pair[section]:
            raise ConfigError(f"{section}.name", name, _pair_conflict(algorithm, pair, section))
        entry = registry.get(name, key=f"{section}.name")
        components[section] = Component(name, build_options(entry.options_cls, values, section=section))
    check_client_eval(run, components["data"].options)
    client_column = getattr(components["data"].options, "client_column", None)
    if client_column and components["partition"].name not in ("natural", "flwr"):
        # Only the dataset's own client split reads it: under iid or dirichlet it would be ignored.
        raise ConfigError("data.client_column", client_column,
                          "is read only with partition.name = 'natural' (or 'flwr' partitioning by the natural "
                          f"clients); here partition.name = {components['partition'].name!r}")
    system = build_options(SystemOptions, dict(raw["system"]), section="system") if "system" in raw else None
    check_system(system, components["participation"])
    asynchronous = (build_options(AsyncOptions, dict(raw["asynchronous"]), section="asynchronous")
                    if "asynchronous" in raw else None)
    check_asynchronous(asynchronous, system, components["participation"], components["server"])
    return ExperimentConfig(run=run, algorithm=algorithm, system=system, asynchronous=asynchronous, **components)


def _name_text(key: str, value: Any) -> str:
    """A component or algorithm name as a plain string (an override's text read as TOML, so that
    ``--set algorithm='"scaffold"'`` and ``--set algorithm=scaffold`` name the same algorithm)."""
    if isinstance(value, OverrideText):
        value = value.parsed
    if not isinstance(value, str):
        raise ConfigError(key, value, "expected a string")
    return str(value)


def _pair_conflict(algorithm: str, pair: Mapping[str, str], section: str) -> str:
    """Why ``section.name`` may not differ from ``algorithm``'s pair (one line, naming both)."""
    return (f"conflicts with algorithm = '{algorithm}', which runs client.name = '{pair['client']}' and "
            f"server.name = '{pair['server']}'; name the algorithm or the {section}, not both "
            f"(an override algorithm=... replaces the file's client.name and server.name)")


def parse_override(text: str) -> tuple[str, Any]:
    """``"section.key=value"`` -> ``("section.key", value)``; the value is read as TOML (numbers,
    booleans, strings, arrays), and as a plain string when it is not valid TOML."""
    if "=" not in text:
        raise ConfigError(text, None, "an override must look like section.key=value")
    key, value_text = text.split("=", 1)
    key = key.strip()
    if key != "algorithm" and not re.fullmatch(r"[A-Za-z_][\w]*\.[A-Za-z_][\w]*", key):
        raise ConfigError(key, value_text, "an override key must look like section.key")
    text = value_text.strip()
    try:
        document = tomllib.loads(f"v = {text}")
    except (tomllib.TOMLDecodeError, RecursionError):
        document = {"v": text}
    if set(document) != {"v"}:
        # "7\n[data]\nalpha=99" parses as v = 7 plus a table of its own, which would be dropped silently.
        raise ConfigError(key, value_text, "one value per override; this text holds more TOML after the "
                                           "value (a line break?): give each key its own --set")
    parsed = document["v"]
    # Scalars keep their raw text too, so a string option takes "nan" or "1" literally.
    return key, OverrideText(text, parsed) if not isinstance(parsed, (list, dict)) else parsed


def apply_overrides(raw: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``raw`` with dotted ``overrides`` applied (a new ``name`` clears that section's
    other keys only if they are not valid for the new component: validation reports them).

    An ``algorithm`` override replaces the pair ``raw`` names: ``raw``'s ``client.name`` and
    ``server.name`` are dropped unless ``overrides`` names them too, so that the override, not the
    file, picks both halves (the module docstring; docs/design.md, "`algorithm = X`")."""
    merged = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in raw.items()}
    if "algorithm" in overrides:
        for section in ("client", "server"):
            if f"{section}.name" not in overrides and isinstance(merged.get(section), dict):
                merged[section].pop("name", None)
    for key, value in overrides.items():
        if key == "algorithm":
            merged["algorithm"] = value
            continue
        section, name = key.split(".", 1)
        if section not in SECTIONS or section == "algorithm":
            raise ConfigError(key, value, "unknown section; allowed: " + ", ".join(SECTIONS[1:]))
        merged.setdefault(section, {})[name] = value
    return merged


def read_toml_file(path: str | Path, *, key: str) -> dict[str, Any]:
    """Parse a TOML file; a missing file or bad TOML is a :class:`ConfigError` on ``key``."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(key, str(path), "no such file")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(key, str(path), f"not valid TOML: {error}") from None
    except RecursionError:          # tomllib recurses per nesting level: a deep file is the user's error
        raise ConfigError(key, str(path), "not valid TOML here: nested too deeply") from None
    except UnicodeDecodeError as error:
        raise ConfigError(key, str(path), f"not UTF-8 text ({error.reason} at byte {error.start})") from None


def load_config(path: str | Path | None, overrides: Sequence[str] | Mapping[str, Any] = ()) -> ExperimentConfig:
    """Read a TOML experiment file (or start from defaults when ``path`` is None) and apply overrides."""
    raw: dict[str, Any] = read_toml_file(path, key="config") if path is not None else {}
    if not isinstance(overrides, Mapping):
        overrides = dict(parse_override(item) for item in overrides)
    return resolve_config(apply_overrides(raw, overrides))


def toml_literal(value: Any) -> str:
    """``value`` (bool, int, float, str, list, tuple or mapping) written as a TOML value: ``nan`` and
    ``inf`` for the float specials, mappings as inline tables."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_literal(v) for v in value) + "]"
    if isinstance(value, Mapping):
        # An inline table; keys that are not bare TOML keys are quoted.
        return "{" + ", ".join(f"{k if re.fullmatch(r'[A-Za-z0-9_-]+', k) else _toml_string(k)} = {toml_literal(v)}"
                               for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {value!r} to TOML")


def _toml_string(text: str) -> str:
    """A TOML basic string: backslash, quote and every control character escaped, so that any
    string (a path with a newline in it included) gives valid TOML that reads back the same."""
    out = []
    for char in text:
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def config_to_toml(config: ExperimentConfig) -> str:
    """The resolved config as TOML; ``None`` values are written as the string ``"none"``."""
    lines = ["# Resolved fedhet configuration (every option, defaults included)."]
    data = config.to_dict()
    if "algorithm" in data:
        lines.append(f"algorithm = {toml_literal(data.pop('algorithm'))}")
    for section, values in data.items():
        lines.append(f"\n[{section}]")
        for key, value in values.items():
            lines.append(f"{key} = {toml_literal('none' if value is None else value)}")
    return "\n".join(lines) + "\n"
