"""The search space: named configuration keys and the values each may take.

A parameter is written ``KEY=SPEC`` (the ``--param`` of ``fedhet tune``); any config key works
(``client.learning_rate``, ``server.learning_rate``, ``client.mu``, ...). SPEC is one of:

- ``V1,V2,...``: these values (each read as TOML: numbers, booleans, strings). The grid takes each;
  Optuna picks among them (categorical).
- ``log:LOW:HIGH:N``: the grid takes N values evenly spaced in ``log`` from LOW to HIGH (both
  included, rounded to 6 significant digits); Optuna draws a float log-uniformly in [LOW, HIGH].
- ``lin:LOW:HIGH:N``: the same, evenly spaced / uniform in [LOW, HIGH].
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import re
import tomllib
from typing import Any, Optional, Sequence

from fedhet.lab.tuning.errors import TuneError

# Keys the search itself sets on every trial.
RESERVED_KEYS = ("run.name", "run.out_dir", "run.seed")


@dataclasses.dataclass(frozen=True)
class SearchParameter:
    """One searched key: its grid values, and for a range its bounds and scale."""

    key: str
    values: tuple[Any, ...]              # the grid's values, in order
    low: Optional[float] = None          # a range's bounds (None: a list of values)
    high: Optional[float] = None
    log: bool = False

    @property
    def is_range(self) -> bool:
        return self.low is not None


# A grid trial is a whole run; no search needs more, and the bound keeps a typo (N = 1e9) from
# exhausting memory before anything runs.
MAX_GRID_POINTS = 10_000


def _scalar(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _range_values(low: float, high: float, count: int, log: bool) -> tuple[float, ...]:
    if count == 1:
        return (low,)
    if log:
        points = [math.exp(math.log(low) + i * (math.log(high) - math.log(low)) / (count - 1)) for i in range(count)]
    else:
        points = [low + i * (high - low) / (count - 1) for i in range(count)]
    return tuple(float(f"{p:.6g}") for p in points)


def parse_parameter(text: str) -> SearchParameter:
    """``"KEY=SPEC"`` -> :class:`SearchParameter` (module docstring); bad text is a :class:`TuneError`."""
    if "=" not in text:
        raise TuneError(f"--param {text!r}: expected KEY=SPEC, e.g. client.learning_rate=log:0.001:1:7")
    key, spec = (part.strip() for part in text.split("=", 1))
    if key != "algorithm" and not re.fullmatch(r"[A-Za-z_]\w*\.[A-Za-z_]\w*", key):
        raise TuneError(f"--param {text!r}: the key must look like section.key (e.g. client.learning_rate)")
    if key in RESERVED_KEYS:
        raise TuneError(f"--param {key}: set by the search itself; allowed: any other config key")
    match = re.fullmatch(r"(log|lin):([^:]+):([^:]+):([^:]+)", spec)
    if match:
        scale, low_text, high_text, count_text = match.groups()
        try:
            low, high, count = float(low_text), float(high_text), int(count_text)
        except ValueError:
            raise TuneError(f"--param {text!r}: {scale}:LOW:HIGH:N needs two numbers and a whole N") from None
        if not (math.isfinite(low) and math.isfinite(high)) or low >= high or count < 1:
            raise TuneError(f"--param {text!r}: need finite LOW < HIGH and N >= 1")
        if scale == "log" and low <= 0:
            raise TuneError(f"--param {text!r}: a log range needs LOW > 0")
        if count > MAX_GRID_POINTS:
            # Checked before the values are made: N = 1e9 took 3 GB before any trial.
            raise TuneError(f"--param {text!r}: N = {count} values; allowed: at most {MAX_GRID_POINTS} "
                            "(a grid of trials, each a whole run)")
        return SearchParameter(key, _range_values(low, high, count, scale == "log"), low, high, scale == "log")
    items = [item.strip() for item in spec.split(",")]
    if not spec.strip() or any(not item for item in items):
        raise TuneError(f"--param {text!r}: give values V1,V2,... or log:LOW:HIGH:N or lin:LOW:HIGH:N")
    values = tuple(_scalar(item) for item in items)
    if len(set(map(repr, values))) != len(values):
        raise TuneError(f"--param {text!r}: a value is repeated")
    return SearchParameter(key, values)


def check_space(space: Sequence[SearchParameter]) -> None:
    """At least one parameter, no key twice."""
    if not space:
        raise TuneError("give at least one --param KEY=SPEC to search")
    keys = [p.key for p in space]
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        raise TuneError(f"--param {', '.join(repeated)} is given twice; allowed: one --param per key")


def grid_points(space: Sequence[SearchParameter]) -> list[dict[str, Any]]:
    """Every combination of the parameters' grid values, the first parameter varying slowest; at most
    :data:`MAX_GRID_POINTS` of them (counted before any is made)."""
    check_space(space)
    size = math.prod(len(p.values) for p in space)
    if size > MAX_GRID_POINTS:
        raise TuneError(f"the grid has {size} points ({' x '.join(str(len(p.values)) for p in space)}); allowed: at "
                        f"most {MAX_GRID_POINTS} trials: use fewer values, or --sampler optuna --trials N")
    return [dict(zip([p.key for p in space], combo)) for combo in itertools.product(*[p.values for p in space])]


def describe(space: Sequence[SearchParameter]) -> list[dict[str, Any]]:
    """A JSON-able description (what a search's out directory records, to refuse a changed space)."""
    return [{"key": p.key, "values": list(p.values), "low": p.low, "high": p.high, "log": p.log} for p in space]
