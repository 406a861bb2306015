"""A sweep as a list of resolved runs, and the state of each run's directory.

The runs are the cross product ``variants x grid axes x seeds`` over a base experiment file. Each
run's configuration is built in this order (later wins)::

    base file  <  variant  <  --set  <  grid assignment  <  run.seed / run.name / run.out_dir

The variant, ``--set``, grid and run keys are applied to the base file as one set of overrides
(:func:`fedhet.config.schema.apply_overrides`), so ``algorithm`` means what it means everywhere
(:mod:`fedhet.config.schema`): when the overrides set ``algorithm``, it replaces the pair the base
file names (the base file's ``client.name`` / ``server.name`` are dropped), and overrides that name
``algorithm`` together with a different ``client.name`` or ``server.name`` are refused.

Every configuration is validated before anything runs. A run directory is ``out_dir/run_name``;
its state is *finished* (a complete ``summary.json``), *resume* (a checkpoint but no complete
summary) or *new*. A directory whose saved ``config.toml`` differs from the planned one is
refused (the sweep's settings changed since): pass ``overwrite`` to rerun it from scratch.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import tomllib
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from fedhet.config import ConfigError, ExperimentConfig, apply_overrides, load_config, parse_override, resolve_config
from fedhet.core import NotAPlainFileError, read_small_file
from fedhet.engine import has_checkpoint
from fedhet.lab.sweep.grid import GridAxis, SweepError, Variant, run_name, setting_name
from fedhet.lab.sweep.options import SECTION as SWEEP_SECTION, SweepOptions, sweep_options
from fedhet.names import check_name

SWEEP_RUN_FILE = "sweep_run.json"      # in each run directory: the run's variant, grid values, seed
SWEEP_FILE = "sweep.json"              # in the sweep directory: the plan and the final status of each run
NEW, RESUME, FINISHED = "new", "resume", "finished"    # the states of a run directory (run_state)
# Room left in a run name (fedhet.names.MAX_NAME_LENGTH) for the variant, grid values and seed.
BASE_NAME_MAX_LENGTH = 100
# Keys that do not change what a run computes (progress bar, torch threads, the resource check, how often the
# checkpoint is written: a resume from any round is bitwise the uninterrupted run) or only say where the directory
# lives (the same --out spelled relative or absolute); a saved config may differ in these.
_INCIDENTAL_KEYS = ("run.progress", "run.threads", "run.out_dir", "run.resource_check", "run.checkpoint_every")


@dataclasses.dataclass(frozen=True)
class PlannedRun:
    """One run of a sweep: its name, directory, resolved configuration and where it sits in the grid."""

    name: str
    run_dir: Path
    config: ExperimentConfig
    label: Optional[str]                        # the variant's name (None without a variants file)
    assignments: tuple[tuple[str, str], ...]    # (grid key, value text), in the order of the axes
    seed: int

    def metadata(self, plan: "SweepPlan") -> dict[str, Any]:
        """What ``sweep_run.json`` records (read back by ``fedhet report`` for the row label)."""
        return {"label": self.label, "assignments": dict(self.assignments), "seed": self.seed,
                "base_config": str(plan.base), "base_name": plan.base_name}


@dataclasses.dataclass(frozen=True)
class SkippedSetting:
    """A variant or grid point left out by ``skip_missing`` because a component or option is missing."""

    name: str
    reason: str


@dataclasses.dataclass(frozen=True)
class DroppedOptions:
    """Base-file options a setting did not carry because its method does not take them."""

    setting: str
    keys: tuple[str, ...]


def dropped_options_line(dropped: Sequence[DroppedOptions]) -> Optional[str]:
    """One line naming the base options left out and the settings they were left out of; None if none."""
    if not dropped:
        return None
    keys = sorted({key for entry in dropped for key in entry.keys})
    settings = [entry.setting for entry in dropped]
    return (f"not carried to the settings whose method does not take them: {', '.join(keys)} "
            f"(in {', '.join(settings)})")


@dataclasses.dataclass(frozen=True)
class SweepPlan:
    base: Path
    base_name: str
    out_dir: Path
    runs: tuple[PlannedRun, ...]
    skipped: tuple[SkippedSetting, ...] = ()
    # How to execute the sweep (fedhet.lab.sweep.options): the base file's [sweep] table.
    options: SweepOptions = SweepOptions()
    # Base-file options left out of settings whose method does not take them (build_run_config_carrying).
    dropped: tuple[DroppedOptions, ...] = ()


def is_missing_component(error: ConfigError) -> bool:
    """True when ``error`` says a component name is not registered or an option key is unknown:
    what a preset that names a not-yet-implemented method or option raises."""
    unknown_name = (error.key == "algorithm" or error.key.endswith(".name")) and "allowed:" in error.allowed
    return unknown_name or error.allowed.startswith("unknown key")


def _read_base(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError("config", str(path), "no such file")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise ConfigError("config", str(path), f"not valid TOML: {error}") from None
    except RecursionError:          # tomllib recurses per nesting level: a deep file is the user's error
        raise ConfigError("config", str(path), "not valid TOML here: nested too deeply") from None


def _normalise_overrides(sets: Sequence[str] | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(sets, Mapping):
        return dict(sets)
    return dict(parse_override(item) for item in sets)


def _component_chosen(section: str, overrides: Mapping[str, Any]) -> Optional[str]:
    """The ``client`` / ``server`` component ``overrides`` choose (its name, or the half of the
    algorithm it names), or None when they leave the base file's."""
    from fedhet.config import ALGORITHMS

    name = overrides.get(f"{section}.name")
    if name is None and "algorithm" in overrides:
        pair = ALGORITHMS.get(str(overrides["algorithm"]))
        name = getattr(pair, section, None) if pair is not None else None
    return name if isinstance(name, str) else None


def _drop_options_the_method_lacks(raw: dict[str, Any], overrides: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``raw`` without the base file's ``[client]`` / ``[server]`` options that the component the
    overrides choose does not take (a preset's ``server.alpha`` for FedAWARE, in the FedAvg variant of
    an algorithm sweep), and those keys. Only the base file's keys are carried this way: an option an
    override itself sets is kept, and still refused when the method lacks it."""
    from fedhet.config import CLIENT_SOLVERS, SERVERS, load_components

    load_components()           # the registries, ALGORITHMS included
    dropped: list[str] = []
    for section, registry in (("client", CLIENT_SOLVERS), ("server", SERVERS)):
        name, table = _component_chosen(section, overrides), raw.get(section)
        if name is None or not isinstance(table, dict):
            continue
        if name not in registry:
            continue                      # resolve_config names the unknown component
        accepted = {f.name for f in dataclasses.fields(registry.get(name).options_cls)} | {"name"}
        lacking = sorted(key for key in table if key not in accepted and f"{section}.{key}" not in overrides)
        if lacking:
            raw = {**raw, section: {k: v for k, v in table.items() if k not in lacking}}
            dropped += [f"{section}.{key}" for key in lacking]
    return raw, dropped


def build_run_config_carrying(raw: Mapping[str, Any], overrides: Mapping[str, Any]) -> tuple[ExperimentConfig, list[str]]:
    """:func:`build_run_config`, and the base file's option keys left out because the setting's
    method does not take them (listed to the user in one line)."""
    base, dropped = _drop_options_the_method_lacks(dict(raw), overrides)
    return resolve_config(apply_overrides(base, overrides)), dropped


def build_run_config(raw: Mapping[str, Any], overrides: Mapping[str, Any]) -> ExperimentConfig:
    """Resolve the base file's mapping with ``overrides`` (the precedence of the module docstring).
    A setting that chooses another method than the base file's carries only the base options that
    method takes (:func:`build_run_config_carrying` also says which were left out)."""
    return build_run_config_carrying(raw, overrides)[0]


def plan_sweep(config_path: str | Path, *, grids: Sequence[GridAxis] = (), seeds: Optional[Sequence[int]] = None,
               variants: Sequence[Variant] = (), sets: Sequence[str] | Mapping[str, Any] = (),
               out_dir: str | Path | None = None, skip_missing: bool = False) -> SweepPlan:
    """All runs of ``variants x grids x seeds`` over the experiment file ``config_path``.

    ``seeds`` defaults to the base file's ``run.seed``; ``out_dir`` to ``run.out_dir / run.name`` of the
    base file. With ``skip_missing``, a variant or grid point whose configuration names a component or
    option that is not registered is left out and listed in :attr:`SweepPlan.skipped`; any other
    configuration error is raised.
    """
    base_path = Path(config_path)
    raw = _read_base(base_path)
    # The [sweep] table says how to execute the runs, not what they compute: not part of their configs.
    options = sweep_options(raw.pop(SWEEP_SECTION, None))
    common = _normalise_overrides(sets)
    for key in ("run.seed", "run.name", "run.out_dir"):
        if key in common:
            raise ConfigError(key, common[key], "set by the sweep itself: use --seeds and --out")
    keys = [axis.key for axis in grids]
    if len(set(keys)) != len(keys):
        raise ConfigError("--grid", ", ".join(keys), "a key is given in two --grid axes")
    base_run = dict(raw.get("run", {})) if isinstance(raw.get("run"), dict) else {}
    # The base name becomes a directory under --out (or run.out_dir): one valid path component, and
    # short enough that <base>__<variant>__<grid>__seed=<s> still fits (fedhet.names).
    base_name = check_name(f"{base_path}: run.name", base_run.get("name", base_path.stem),
                           max_length=BASE_NAME_MAX_LENGTH)
    out = Path(out_dir) if out_dir is not None else Path(str(base_run.get("out_dir", "runs"))) / base_name
    seed_list = tuple(seeds) if seeds else (int(base_run.get("seed", 1)),)

    runs: list[PlannedRun] = []
    skipped: list[SkippedSetting] = []
    dropped: list[DroppedOptions] = []
    for variant in (variants or [None]):
        for point in itertools.product(*[list(zip(axis.values, axis.texts)) for axis in grids]):
            assignments = tuple((key, text) for key, (_value, text) in zip(keys, point))
            overrides = {**(variant.overrides if variant else {}), **common,
                         **{key: value for key, (value, _text) in zip(keys, point)}}
            variant_name = variant.name if variant else None
            setting = setting_name(base_name, variant=variant_name, assignments=assignments)
            try:
                built = [build_run_config_carrying(raw, {**overrides, "run.seed": seed, "run.out_dir": str(out),
                                                         "run.progress": False,
                                                         "run.name": run_name(base_name, variant=variant_name,
                                                                              assignments=assignments, seed=seed)})
                         for seed in seed_list]
                configs = [config for config, _ in built]
                if built and built[0][1]:
                    dropped.append(DroppedOptions(setting, tuple(built[0][1])))
            except ConfigError as error:
                if skip_missing and is_missing_component(error):
                    skipped.append(SkippedSetting(setting, str(error)))
                    continue
                raise ConfigError(error.key, error.value, f"{error.allowed} (in sweep setting {setting})") from None
            for seed, config in zip(seed_list, configs):
                runs.append(PlannedRun(config.run.name, out / config.run.name, config, variant_name,
                                       assignments, seed))
    names = [run.name for run in runs]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise SweepError("two settings give the same run name (values that differ only in characters "
                         f"replaced in names): {', '.join(duplicates)}")
    return SweepPlan(base_path, base_name, out, tuple(runs), tuple(skipped), options, tuple(dropped))


# --- the state of a run's directory -------------------------------------------------------------


def read_summary(run_dir: Path) -> Optional[dict[str, Any]]:
    """The run's ``summary.json``, or None when absent or unreadable (also a FIFO, a device or a huge
    file planted in its place, which must not hang or exhaust the reader; docs/reliability.md)."""
    try:
        return json.loads(read_small_file(run_dir / "summary.json").decode("utf-8"))
    except (FileNotFoundError, NotAPlainFileError, json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return None


def summary_is_complete(summary: Optional[Mapping[str, Any]], total_rounds: int) -> bool:
    """A run is finished when its summary covers every round, or it stopped early on purpose."""
    if not summary:
        return False
    return bool(summary.get("stopped_early")) or int(summary.get("rounds", 0)) >= total_rounds


def config_differences(saved: ExperimentConfig, planned: ExperimentConfig) -> list[str]:
    """Dotted keys whose values differ (the incidental keys above, such as ``run.progress``, ignored)."""
    a, b = saved.to_flat_dict(), planned.to_flat_dict()
    return sorted(key for key in set(a) | set(b) if key not in _INCIDENTAL_KEYS and a.get(key) != b.get(key))


def run_state(run: PlannedRun) -> tuple[str, Optional[str]]:
    """``(state, conflict)``: the state of the run's directory, and why it cannot be used as it is
    (its saved configuration differs from the planned one), or None."""
    saved_path = run.run_dir / "config.toml"
    checkpointed = has_checkpoint(run.run_dir)
    if not saved_path.is_file():
        return (RESUME if checkpointed else NEW), (
            "it holds a checkpoint but no config.toml" if checkpointed else None)
    try:
        differences = config_differences(load_config(saved_path), run.config)
    except ConfigError as error:
        return NEW, f"its config.toml no longer loads ({error})"
    if differences:
        return NEW, "its config.toml differs from the sweep's in " + ", ".join(differences)
    if summary_is_complete(read_summary(run.run_dir), run.config.run.rounds):
        return FINISHED, None
    return (RESUME if checkpointed else NEW), None
