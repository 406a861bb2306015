"""Runs -> groups of seeds -> sections of a table.

A **group** is the runs that share a label and a *setting*: every configuration value except
``run.seed``, ``run.name`` and ``run.out_dir`` (and ``run.progress`` / ``run.threads``, which do
not change what a run computes). Its runs differ only in their seed.

A **section** is one table: the groups that share the values of the *section keys*. By default these
are the keys outside ``algorithm`` / ``[client]`` / ``[server]`` whose values differ between
groups (the dataset, the partition, the participation pattern, ...), so each paper setting gets its
own table and the algorithms are its rows; ``group_by`` names them explicitly instead.

Within a section a row is named by its label (the sweep variant, else the algorithm), followed by
the values of the keys that tell apart the rows sharing that label (e.g. a grid over
``server.learning_rate``). Values that every group shares are the report's *common setting*.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Optional, Sequence

from fedhet.lab.report.runs import RunData, RunDirectoryError

EXCLUDED_KEYS = frozenset({"run.seed", "run.name", "run.out_dir", "run.progress", "run.threads"})
ALGORITHM_SECTIONS = ("algorithm", "client", "server")
_MISSING = "(not set)"


def setting_of(run: RunData) -> dict[str, Any]:
    """The run's configuration as dotted keys, without the keys that only name or place it."""
    return {k: v for k, v in run.config.to_flat_dict().items() if k not in EXCLUDED_KEYS}


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    return str(value)


def assignments_text(values: dict[str, Any]) -> str:
    return ", ".join(f"{key}={format_value(value)}" for key, value in values.items())


@dataclasses.dataclass
class Group:
    label: str
    setting: dict[str, Any]
    runs: list[RunData]
    display: str = ""

    @property
    def seeds(self) -> list[int]:
        return [run.seed for run in self.runs]


@dataclasses.dataclass
class Section:
    title: str
    values: dict[str, Any]          # the section keys' values
    groups: list[Group]


def _canonical(setting: dict[str, Any]) -> str:
    return json.dumps(setting, sort_keys=True, default=str)


def group_runs(runs: Sequence[RunData], *, warn=lambda message: None) -> list[Group]:
    """Groups in order of first appearance; runs inside a group sorted by seed. Two runs with the same
    setting, label and seed are one run made twice: the first is kept, with a warning."""
    groups: dict[tuple[str, str], Group] = {}
    for run in runs:
        setting = setting_of(run)
        key = (run.label, _canonical(setting))
        group = groups.setdefault(key, Group(run.label, setting, []))
        twin = next((other for other in group.runs if other.seed == run.seed), None)
        if twin is not None:
            warn(f"left out {run.path}: same setting and seed ({run.seed}) as {twin.path}")
            continue
        group.runs.append(run)
    for group in groups.values():
        group.runs.sort(key=lambda r: r.seed)
    return list(groups.values())


def varying_keys(groups: Sequence[Group]) -> list[str]:
    """Keys whose value is not the same in every group (a key missing from a group counts as a value)."""
    keys = sorted({key for group in groups for key in group.setting})
    return [key for key in keys
            if len({_canonical({"v": group.setting.get(key, _MISSING)}) for group in groups}) > 1]


def common_setting(groups: Sequence[Group]) -> dict[str, Any]:
    varying = set(varying_keys(groups))
    first = groups[0].setting if groups else {}
    return {key: value for key, value in first.items() if key not in varying}


def make_sections(groups: Sequence[Group], group_by: Optional[Sequence[str]] = None) -> list[Section]:
    """Split ``groups`` into sections (see the module docstring) and set each group's row name."""
    varying = varying_keys(groups)
    if group_by is None:
        section_keys = [key for key in varying if key.split(".", 1)[0] not in ALGORITHM_SECTIONS]
    else:
        known = {key for group in groups for key in group.setting}
        unknown = [key for key in group_by if key not in known]
        if unknown:
            raise RunDirectoryError(f"--group-by {', '.join(unknown)}: not a configuration key of these runs "
                                    "(keys look like partition.alpha, participation.pattern, data.name)")
        section_keys = list(group_by)
    sections: dict[str, Section] = {}
    for group in groups:
        values = {key: group.setting.get(key, _MISSING) for key in section_keys}
        # Keys a section's runs do not have (options of another component) group but do not title it.
        shown = {key: value for key, value in values.items() if value is not _MISSING}
        title = assignments_text(shown) if shown else "all runs"
        sections.setdefault(_canonical(values), Section(title, values, [])).groups.append(group)
    for section in sections.values():
        _name_rows(section, section_keys)
    _prefix_base_names(list(sections.values()))
    return list(sections.values())


def _name_rows(section: Section, section_keys: Sequence[str]) -> None:
    by_label: dict[str, list[Group]] = {}
    for group in section.groups:
        by_label.setdefault(group.label, []).append(group)
    for label, same in by_label.items():
        keys = [key for key in varying_keys(same) if key not in section_keys]
        for group in same:
            extra = {key: group.setting.get(key, _MISSING) for key in keys}
            group.display = f"{label} ({assignments_text(extra)})" if extra else label


def _prefix_base_names(sections: list[Section]) -> None:
    """When sections come from different sweeps (base experiment files), name each section's sweep."""
    bases = []
    for section in sections:
        names = {run.sweep.get("base_name") for group in section.groups for run in group.runs}
        bases.append(names.pop() if len(names) == 1 else None)
    if len(sections) > 1 and None not in bases and len(set(bases)) > 1:
        for section, base in zip(sections, bases):
            section.title = f"{base}: {section.title}" if section.values else str(base)
