"""The axes of a sweep: ``--grid key=v1,v2,...``, ``--seeds 1,2,3``, variants files, run names.

A **grid axis** is one configuration key and the values it takes; a sweep runs the cross product of
its axes (and seeds). A key is a dotted ``section.key`` (``server.learning_rate``,
``server.name``) or ``algorithm``. Values are read as in ``--set``: TOML when they parse as TOML
(numbers, booleans, ``[1, 2]`` arrays, quoted strings), else the plain text.

A **variants file** names whole settings that differ in several keys at once, typically the
algorithms of a paper's table with their own hyperparameters. Each top-level table is one variant;
inside it, the same sections as an experiment file (and optionally ``algorithm``)::

    # FedAvgM: heavy-ball server momentum (Hsu et al. 2019).
    [fedavgm]
    server.name = "fedavgm"
    server.momentum = 0.9

    [scaffold]
    algorithm = "scaffold"

The variant's name is the row label in reports and part of its runs' names.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, Optional, Sequence

from fedhet.config import SECTIONS, ConfigError, parse_override, read_toml_file
from fedhet.errors import FedhetError

# Characters kept in run names; anything else becomes "_" so a name is one safe path component.
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9._+=-]")
_VARIANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
RUN_NAME_SEPARATOR = "__"
VARIANT_NAME_MAX_LENGTH = 60     # with a base name of up to 100, run names stay within fedhet.names' limit


class SweepError(FedhetError, ValueError):
    """A sweep cannot be planned or run as asked; the message names what is wrong."""


@dataclasses.dataclass(frozen=True)
class GridAxis:
    """One ``--grid`` axis: a key, its values (as ``--set`` reads them) and their texts (for names)."""

    key: str
    values: tuple[Any, ...]
    texts: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Variant:
    """A named setting: dotted overrides (``{"server.name": "fedavgm", "server.momentum": 0.9}``)."""

    name: str
    overrides: dict[str, Any]


def split_values(text: str) -> list[str]:
    """Split ``v1,v2,...`` at the commas outside brackets, braces and quotes (so ``[200,200]`` is one value)."""
    parts, depth, quote, current = [], 0, None, []
    for char in text:
        if quote:
            quote = None if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    parts.append("".join(current).strip())
    return parts


def parse_grid(text: str) -> GridAxis:
    """``"key=v1,v2,..."`` -> :class:`GridAxis`; a key given twice or an empty value is an error."""
    if "=" not in text:
        raise ConfigError("--grid", text, "a grid axis looks like section.key=v1,v2,... (or algorithm=a,b)")
    key, values_text = (part.strip() for part in text.split("=", 1))
    texts = split_values(values_text)
    if len(texts) == 1 and texts[0].startswith("[") and texts[0].endswith("]"):
        # Hydra's and Python's list syntax; here a bracketed value is one value (of a list option).
        inner = texts[0][1:-1].strip()
        raise ConfigError("--grid", text, f"the values of a grid axis are comma-separated without brackets: "
                          f"--grid {key}={inner} (a list option's values are bracketed each: "
                          f"--grid {key}=[1,2],[3,4])")
    if any(not value for value in texts):
        raise ConfigError("--grid", text, "empty value in the list; give comma-separated values")
    if len(set(texts)) != len(texts):
        raise ConfigError("--grid", text, "a value is listed twice")
    values = tuple(parse_override(f"{key}={value}")[1] for value in texts)
    _check_key(key, "--grid")
    return GridAxis(key, values, tuple(texts))


def _check_key(key: str, where: str) -> None:
    section = key.split(".", 1)[0]
    if key != "algorithm" and section not in SECTIONS:
        raise ConfigError(key, where, "unknown section; allowed: algorithm, " + ", ".join(SECTIONS[1:]))
    if key in ("run.seed", "run.name", "run.out_dir"):
        raise ConfigError(key, where, "set by the sweep itself: use --seeds for seeds and --out for the directory")


def parse_seeds(text: str) -> tuple[int, ...]:
    """``"1,2,3"`` -> ``(1, 2, 3)``: distinct non-negative integers."""
    seeds = []
    for part in split_values(text):
        if not re.fullmatch(r"\d+", part):
            raise ConfigError("--seeds", text, "comma-separated non-negative integers, e.g. 1,2,3")
        seeds.append(int(part))
    if len(set(seeds)) != len(seeds):
        raise ConfigError("--seeds", text, "a seed is listed twice")
    return tuple(seeds)


def variant_overrides(path: Path, name: str, table: Any) -> dict[str, Any]:
    """A variant's table of sections (``[name]`` of a variants file, read from ``path``) as flat
    overrides ``section.key -> value`` (``algorithm`` stays a key); an unknown section or key is an error."""
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: {name}", table, "each top-level entry of a variants file must be a table "
                          f"[{name}] holding the variant's sections (server.name = ..., client.mu = ...)")
    overrides: dict[str, Any] = {}
    for section, values in table.items():
        if section == "algorithm":
            overrides["algorithm"] = values
        elif section in SECTIONS:
            if not isinstance(values, dict):
                raise ConfigError(f"{path}: {name}.{section}", values, "expected a table of that section's keys")
            for key, value in values.items():
                full = f"{section}.{key}"
                _check_key(full, f"{path}: variant {name}")
                overrides[full] = value
        else:
            raise ConfigError(f"{path}: {name}.{section}", values,
                              "unknown section; allowed: algorithm, " + ", ".join(SECTIONS[1:]))
    return overrides


def load_variants(path: str | Path) -> list[Variant]:
    """Read a variants file (see the module docstring); variants keep the file's order."""
    path = Path(path)
    raw = read_toml_file(path, key="--variants")
    if not raw:
        raise ConfigError("--variants", str(path), "the file defines no variant ([name] tables)")
    variants = []
    for name, table in raw.items():
        if not _VARIANT_NAME.fullmatch(name) or len(name) > VARIANT_NAME_MAX_LENGTH:
            raise ConfigError(f"{path}: [{name}]", name, f"a variant name uses letters, digits and . _ + -, at "
                              f"most {VARIANT_NAME_MAX_LENGTH} characters (it becomes part of run directory names)")
        variants.append(Variant(name, variant_overrides(path, name, table)))
    return variants


def select_variants(variants: Sequence[Variant], only: Optional[Sequence[str]]) -> list[Variant]:
    """The variants named in ``only`` (all when None), in the file's order; unknown names are an error."""
    if only is None:
        return list(variants)
    known = [v.name for v in variants]
    unknown = [name for name in only if name not in known]
    if unknown:
        raise ConfigError("--only", ",".join(unknown), "not in the variants file; allowed: " + ", ".join(known))
    return [v for v in variants if v.name in only]


def name_token(text: str) -> str:
    """A value's text as it appears in a run name: quotes dropped, unsafe characters replaced by ``_``."""
    text = str(text).strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1]
    return _NAME_UNSAFE.sub("_", text) or "_"


def setting_name(base: str, *, variant: Optional[str] = None, assignments: Sequence[tuple[str, str]] = ()) -> str:
    """``<base>[__<variant>][__<key>=<value> ...]``: a sweep setting (a run name without its seed),
    with the grid assignments in the order the axes were given."""
    parts = [name_token(base)]
    if variant is not None:
        parts.append(name_token(variant))
    parts.extend(f"{key}={name_token(text)}" for key, text in assignments)
    return RUN_NAME_SEPARATOR.join(parts)


def run_name(base: str, *, variant: Optional[str] = None, assignments: Sequence[tuple[str, str]] = (),
             seed: int) -> str:
    """The deterministic name of one run of a sweep::

        <base>[__<variant>][__<key>=<value> ...]__seed=<seed>

    e.g. ``fmnist__fedavgm__server.learning_rate=0.1__seed=2``.
    """
    return f"{setting_name(base, variant=variant, assignments=assignments)}{RUN_NAME_SEPARATOR}seed={seed}"
