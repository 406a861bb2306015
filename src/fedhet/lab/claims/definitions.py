"""The claims suite as data: protocols (shared sweeps) and claims (comparisons between their methods).

Two kinds of TOML file live in a claims directory (``configs/claims/``):

- ``protocols.toml``: ``[protocol.NAME]`` tables. A protocol is one sweep: a base experiment file, the
  values ``set`` on every run, the seeds, the tiers' values, its ``regime``, and its methods
  ``[protocol.NAME.method.M]``: configuration keys written as in an experiment file (``server.name``,
  ``client.mu``, ``algorithm``) plus ``lr_source``, where the method's learning rates come from
  (``"paper: <table>"``, ``"tuned: ..."``, ``"untuned: <why>"``, ``"pending: ..."``), optionally its own
  ``quick`` / ``full`` tables and ``same_as = "PROTOCOL/METHOD"`` (it shares that method's values and
  adds only keys of its own: :mod:`fedhet.lab.claims.same_as`). ``methods_from = "OTHER"`` reuses
  another protocol's methods. **Tiers** (:data:`TIERS`): ``default`` is the plain protocol (``seeds``);
  ``quick`` applies the ``quick`` values (``quick_seeds``, default ``seeds``), minutes and below the
  regime; ``full`` applies the ``full`` values (``full_seeds``), the papers' lengths. Precedence, later
  wins: base file < ``set`` < method < the protocol's tier table < the method's tier table. ``regime``: the smallest values at which the protocol's claimed effect is
  expected (``{ "run.rounds" = 300, "client.epochs" = 3 }``); a run whose resolved value is below one of
  them is *below regime* (:meth:`Protocol.below_regime`) and its claims get no verdict.
  ``tuning_seed``: the seed the protocol's tuning used (disjoint from the evaluation seeds).
- every other ``*.toml`` of the directory but ``tuning.toml`` (the pre-registered tuning plan) and its
  subdirectories (which hold the base files): one claim
  each: ``id``, ``paper``, ``source`` (table or figure), ``statement``, ``paper_protocol``, ``here`` (how
  it is run here), ``quantifier`` (``all`` / ``most``, as the paper states the claim), a default
  ``metric``, ``direction``, ``margin`` and ``delta``, and ``[[comparison]]`` tables: ``method`` and
  ``baseline`` as ``"protocol/method"``, the paper's numbers (``paper``), ``role`` (``primary``, the
  default, enters the verdict; ``reported`` is shown only), and optionally their own ``metric`` /
  ``direction`` / ``margin`` / ``delta`` and, for ``rounds_to_target``, ``target`` (an accuracy in
  (0, 1]; default: the base file's ``run.target_accuracy``).

Metrics: ``last_accuracy`` (mean test accuracy over the evaluated rounds of the last 10% of rounds),
``best_accuracy`` (the highest evaluated test accuracy), ``e_ludd`` (mean e-LUD over rounds) and
``rounds_to_target`` (first evaluated round reaching ``run.target_accuracy``), and two descriptions of a
server's step for reported comparisons: ``update_norm`` (the mean length of the server's step over the
evaluated rounds) and ``aware_cosine`` (the mean cosine between an AWARE arm's method step and FedAWARE's
direction). Directions: ``greater``,
``less`` (rounds to target) and ``not_worse`` (by ``margin``, in the metric's units: 0.01 = 1 accuracy
point). ``delta``: the minimal effect the comparison claims, in the metric's units after orientation
(positive for ``greater`` and ``less``; ``not_worse`` may use 0). The verdict rule is
:mod:`fedhet.lab.claims.verdict`.

**The regime, numerically.** For a regime value that is a number the run's resolved value must be a
number at least as large (``client.epochs = 3`` is met by 3 or 5 epochs, not by 1, nor by an unset
``client.epochs`` when the base file counts ``client.local_steps`` instead); for text or a boolean it
must be equal.
"""
from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import Any, Mapping, Optional

from fedhet.config import read_toml_file
from fedhet.errors import FedhetError
from fedhet.lab.claims.same_as import SAME_AS, TIER_TABLES, TUNED, SameAsError, resolve_same_as
from fedhet.lab.claims.verdict import QUANTIFIERS, ROLES
from fedhet.lab.sweep.grid import SweepError, Variant, variant_overrides

PROTOCOLS_FILE = "protocols.toml"
# The pre-registered tuning plan beside the protocols (fedhet.lab.tuning.preregistered): not a claim.
TUNING_FILE = "tuning.toml"
LR_SOURCES = ("paper", "tuned", "untuned", "pending")
METRICS = ("last_accuracy", "best_accuracy", "e_ludd", "rounds_to_target", "update_norm", "aware_cosine")
DIRECTIONS = ("greater", "less", "not_worse")
_NAME = re.compile(r"[a-z0-9][a-z0-9_]*")
_ID = re.compile(r"[a-z0-9][a-z0-9-]*")
TIERS = ("quick", "default", "full")
_PROTOCOL_KEYS = {"base", "title", "seeds", "quick_seeds", "full_seeds", "set", "quick", "full", "quick_lr_source",
                  "full_lr_source", "regime", "tuning_seed", "method", "methods_from"}
_CLAIM_KEYS = {"id", "paper", "source", "statement", "paper_protocol", "here", "quantifier", "metric", "direction",
               "margin", "delta", "comparison", "failure_value", "headroom", "pending"}
_HEADROOM_KEYS = {"reference", "baselines", "metric", "delta"}
_COMPARISON_KEYS = {"method", "baseline", "paper", "role", "metric", "direction", "margin", "delta", "target"}


class ClaimsError(FedhetError, ValueError):
    """A claims or protocols file is not usable as written; the message names the file, key and rule."""


@dataclasses.dataclass(frozen=True)
class Method:
    """One method of a protocol: its configuration overrides and where its learning rates come from."""

    name: str
    overrides: dict[str, Any]
    lr_source: str
    tiers: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)   # the method's own quick / full
    same_as: Optional[str] = None         # "protocol/method" whose values it shares (fedhet.lab.claims.same_as)
    tuned: tuple[str, ...] = ()           # keys it searches apart from its same_as reference


def check_tier(tier: str) -> str:
    if tier not in TIERS:
        raise ClaimsError(f"--tier {tier}: allowed: {', '.join(TIERS)}")
    return tier


@dataclasses.dataclass(frozen=True)
class Protocol:
    name: str
    base: Path
    title: str
    seeds: tuple[int, ...]
    quick_seeds: tuple[int, ...]
    full_seeds: tuple[int, ...]
    sets: dict[str, Any]
    quick: dict[str, Any]
    full: dict[str, Any]
    quick_lr_source: Optional[str]
    full_lr_source: Optional[str]
    methods: dict[str, Method]
    regime: dict[str, Any] = dataclasses.field(default_factory=dict)
    tuning_seed: Optional[int] = None

    def tier_values(self, tier: str) -> dict[str, Any]:
        """The values ``tier`` applies over the methods' (none for the default tier)."""
        return {"quick": self.quick, "default": {}, "full": self.full}[check_tier(tier)]

    def overrides(self, method: str, *, tier: str) -> dict[str, Any]:
        """The values a run of ``method`` applies over the base file (precedence of the module docstring)."""
        own = self.methods[method]
        return {**self.sets, **own.overrides, **self.tier_values(tier), **own.tiers.get(tier, {})}

    def variant(self, method: str, *, tier: str) -> Variant:
        return Variant(method, self.overrides(method, tier=tier))

    def run_seeds(self, *, tier: str) -> tuple[int, ...]:
        return {"quick": self.quick_seeds, "default": self.seeds, "full": self.full_seeds}[check_tier(tier)]

    def lr_source(self, method: str, *, tier: str) -> str:
        """Where the method's learning rates come from in this tier (a tier may set them for all)."""
        source = {"quick": self.quick_lr_source, "default": None, "full": self.full_lr_source}[check_tier(tier)]
        if source and any("learning_rate" in key for key in self.tier_values(tier)):
            return source
        return self.methods[method].lr_source

    def below_regime(self, resolved: Mapping[str, Any]) -> list[str]:
        """The regime keys that the resolved flat configuration ``resolved`` does not meet, each as
        ``"key = value < regime"`` (module docstring, "The regime, numerically"); empty at or above it."""
        below = []
        for key, wanted in self.regime.items():
            if key not in resolved:
                raise ClaimsError(f"[protocol.{self.name}] regime: {key!r} is not a configuration key of its runs; "
                                  "use dotted keys as in an experiment file, e.g. \"run.rounds\"")
            value = resolved[key]
            if _is_number(wanted):
                if not _is_number(value) or value < wanted:
                    below.append(f"{key} = {value!r} < {wanted!r}")
            elif value != wanted:
                below.append(f"{key} = {value!r} != {wanted!r}")
        return below


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclasses.dataclass(frozen=True)
class Side:
    """``protocol/method``: one side of a comparison."""

    protocol: str
    method: str

    @property
    def text(self) -> str:
        return f"{self.protocol}/{self.method}"


@dataclasses.dataclass(frozen=True)
class Comparison:
    method: Side
    baseline: Side
    metric: str
    direction: str
    margin: float
    paper: str
    delta: float = 0.0
    role: str = "primary"
    target: Optional[float] = None       # rounds_to_target only: None = the base file's run.target_accuracy

    @property
    def primary(self) -> bool:
        return self.role == "primary"


@dataclasses.dataclass(frozen=True)
class Headroom:
    """The claim's headroom gate: no verdict when the best baseline ends within ``delta`` of ``reference``
    (the same method on an IID split), since then no method has room to beat it at this scale."""

    reference: Side
    baselines: tuple[Side, ...]
    metric: str
    delta: float


@dataclasses.dataclass(frozen=True)
class Claim:
    id: str
    path: Path
    paper: str
    source: str
    statement: str
    paper_protocol: str
    here: str
    comparisons: tuple[Comparison, ...]
    quantifier: str = "all"
    # An accuracy given to a planned run that diverged (chance accuracy): it enters the statistics, flagged,
    # instead of being dropped. None: a diverged run is missing.
    failure_value: Optional[float] = None
    headroom: Optional[Headroom] = None
    # A value of the claim itself still to be fixed by a pre-registered step (a pilot's target): no verdict
    # until the step has run and the value is committed.
    pending: Optional[str] = None

    @property
    def protocols(self) -> list[str]:
        """The protocols the claim reads, in order of first use."""
        names: list[str] = []
        for comparison in self.comparisons:
            for side in (comparison.method, comparison.baseline):
                if side.protocol not in names:
                    names.append(side.protocol)
        return names


@dataclasses.dataclass(frozen=True)
class ClaimsSuite:
    directory: Path
    protocols: dict[str, Protocol]
    claims: tuple[Claim, ...]

    def select(self, ids: Optional[list[str]]) -> tuple[Claim, ...]:
        """The claims named in ``ids`` (all when None), in the suite's order; an unknown id is an error."""
        if ids is None:
            return self.claims
        known = [claim.id for claim in self.claims]
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise ClaimsError(f"--only {','.join(unknown)}: no such claim; claims: {', '.join(known)}")
        return tuple(claim for claim in self.claims if claim.id in ids)

    def needed_methods(self, claims: tuple[Claim, ...]) -> dict[str, list[str]]:
        """Protocol -> the methods these claims compare, in the protocols file's order (protocols too)."""
        used = {(side.protocol, side.method) for claim in claims for c in claim.comparisons
                for side in (c.method, c.baseline)}
        return {name: [m for m in protocol.methods if (name, m) in used]
                for name, protocol in self.protocols.items() if any(p == name for p, _ in used)}


def _fail(where: str, message: str) -> ClaimsError:
    return ClaimsError(f"{where}: {message}")


def _seeds(where: str, value: Any) -> tuple[int, ...]:
    if (not isinstance(value, list) or not value
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in value)
            or len(set(value)) != len(value)):
        raise _fail(where, f"{value!r}: a list of distinct non-negative integers, e.g. [1, 2, 3]")
    return tuple(value)


def _flat(where: str, value: Any) -> dict[str, Any]:
    """A ``{ "section.key" = value }`` inline table, or nested section tables, as dotted keys."""
    if not isinstance(value, dict):
        raise _fail(where, f"{value!r}: a table of configuration keys")
    flat: dict[str, Any] = {}
    for key, item in value.items():
        if isinstance(item, dict) and "." not in key:
            flat.update({f"{key}.{k}": v for k, v in item.items()})
        else:
            flat[key] = item
    return flat


def _method(path: Path, protocol: str, name: str, table: Any, resolved: Mapping[str, Any]) -> Method:
    """One method from its raw ``table`` (names checked) and its ``resolved`` table (``same_as`` followed,
    dotted keys: :func:`fedhet.lab.claims.same_as.resolve_same_as`)."""
    where = f"{path}: [protocol.{protocol}.method.{name}]"
    if not _NAME.fullmatch(name):
        raise _fail(where, "a method name uses lower-case letters, digits and _")
    if not isinstance(table, dict):
        raise _fail(where, "expected a table of configuration keys and lr_source")
    resolved = dict(resolved)
    lr_source = resolved.pop("lr_source", None)
    if not isinstance(lr_source, str) or not lr_source.split(":", 1)[0] in LR_SOURCES:
        raise _fail(where, f"lr_source = {lr_source!r}: say where the learning rates come from, starting with "
                           + ", ".join(f"'{word}:'" for word in LR_SOURCES))
    same_as = resolved.pop(SAME_AS, None)
    tuned = tuple(resolved.pop(TUNED, ()))
    tiers = {tier: resolved.pop(tier) for tier in TIER_TABLES if tier in resolved}
    try:
        overrides = variant_overrides(path, f"protocol.{protocol}.method.{name}", _nested(resolved))
        tiers = {tier: variant_overrides(path, f"protocol.{protocol}.method.{name}.{tier}", _nested(values))
                 for tier, values in tiers.items()}
    except SweepError as error:
        raise _fail(where, str(error)) from None
    except FedhetError as error:
        raise _fail(where, str(error)) from None
    return Method(name, overrides, lr_source, tiers, same_as, tuned)


def _nested(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted keys back into section tables, as a variants file writes them (``algorithm`` stays a value)."""
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        if "." in key:
            section, option = key.split(".", 1)
            nested.setdefault(section, {})[option] = value
        else:
            nested[key] = value
    return nested


def _protocol(path: Path, name: str, table: Any, methods_of: Mapping[str, dict[str, Method]],
              resolved: Mapping[str, Any]) -> Protocol:
    where = f"{path}: [protocol.{name}]"
    if not _NAME.fullmatch(name):
        raise _fail(where, "a protocol name uses lower-case letters, digits and _ (it names a directory)")
    if not isinstance(table, dict):
        raise _fail(where, "expected a table")
    unknown = sorted(set(table) - _PROTOCOL_KEYS)
    if unknown:
        raise _fail(where, f"unknown key {', '.join(unknown)}; allowed: {', '.join(sorted(_PROTOCOL_KEYS))}")
    if not isinstance(table.get("base"), str):
        raise _fail(where, "base = \"FILE.toml\" (the base experiment file, relative to the protocols file) is required")
    base = (path.parent / table["base"]).resolve()
    if not base.is_file():
        raise _fail(where, f"base = {table['base']!r}: no such file ({base})")
    seeds = _seeds(f"{where} seeds", table.get("seeds"))
    quick_seeds = _seeds(f"{where} quick_seeds", table["quick_seeds"]) if "quick_seeds" in table else seeds
    full_seeds = _seeds(f"{where} full_seeds", table["full_seeds"]) if "full_seeds" in table else seeds
    tuning_seed = table.get("tuning_seed")
    if tuning_seed is not None:
        if not isinstance(tuning_seed, int) or isinstance(tuning_seed, bool) or tuning_seed < 0:
            raise _fail(where, f"tuning_seed = {tuning_seed!r}: a non-negative integer")
        evaluated = sorted({*seeds, *quick_seeds, *full_seeds})
        if tuning_seed in evaluated:
            raise _fail(where, f"tuning_seed = {tuning_seed} is also an evaluation seed ({evaluated}); "
                               "tuning must not see the runs it is judged on")
    if "methods_from" in table:
        if "method" in table:
            raise _fail(where, "give either methods_from or [method.*] tables, not both")
        source = table["methods_from"]
        if source not in methods_of:
            raise _fail(where, f"methods_from = {source!r}: not a protocol defined above it")
        methods = dict(methods_of[source])
    else:
        raw_methods = table.get("method")
        if not isinstance(raw_methods, dict) or not raw_methods:
            raise _fail(where, "no methods: add [protocol.NAME.method.M] tables, or methods_from = \"OTHER\"")
        methods = {m: _method(path, name, m, t, resolved[f"{name}/{m}"]) for m, t in raw_methods.items()}
    sources = {}
    for key in ("quick_lr_source", "full_lr_source"):
        sources[key] = table.get(key)
        if sources[key] is not None and not isinstance(sources[key], str):
            raise _fail(where, f"{key} must be text")
    return Protocol(name, base, str(table.get("title", name)), seeds, quick_seeds, full_seeds,
                    _flat(f"{where} set", table.get("set", {})), _flat(f"{where} quick", table.get("quick", {})),
                    _flat(f"{where} full", table.get("full", {})), sources["quick_lr_source"],
                    sources["full_lr_source"], methods, _regime(where, table.get("regime", {})), tuning_seed)


def _regime(where: str, value: Any) -> dict[str, Any]:
    regime = _flat(f"{where} regime", value)
    for key, wanted in regime.items():
        if "." not in key and key != "algorithm":
            raise _fail(f"{where} regime", f"{key!r}: a dotted configuration key, e.g. \"run.rounds\"")
        if not isinstance(wanted, (int, float, str, bool)):
            raise _fail(f"{where} regime", f"{key} = {wanted!r}: a number (the smallest value at which the "
                                           "claimed effect is expected), or a text / boolean that must match")
        expected = _option_kind(key)
        if expected is not None and _value_kind(wanted) != expected:
            # "many" for run.rounds would put every run below the regime: no claim would get a verdict.
            raise _fail(f"{where} regime", f"{key} = {wanted!r}: {key} is a {expected} option, so its regime "
                                           f"value must be a {expected}")
    return regime


def _value_kind(value: Any) -> str:
    return "boolean" if isinstance(value, bool) else "number" if _is_number(value) else "text"


def _option_kind(key: str) -> Optional[str]:
    """``number``, ``text`` or ``boolean`` for a key of the options every run, solver or server method
    has (``run.rounds``, ``client.epochs``); None for another key (a method's own option)."""
    import typing

    from fedhet.config import ClientOptions, RunOptions, ServerOptions, SystemOptions

    section, _, name = key.partition(".")
    options = {"run": RunOptions, "client": ClientOptions, "server": ServerOptions, "system": SystemOptions}.get(section)
    if options is None:
        return None
    hint = typing.get_type_hints(options).get(name)
    kinds = {arg for arg in typing.get_args(hint) or (hint,) if arg is not type(None)}
    if kinds and kinds <= {int, float}:
        return "number"
    return {frozenset({str}): "text", frozenset({bool}): "boolean"}.get(frozenset(kinds))


def load_protocols(path: str | Path) -> dict[str, Protocol]:
    """Read ``protocols.toml`` (see the module docstring); protocols keep the file's order."""
    path = Path(path)
    try:
        raw = read_toml_file(path, key="protocols")
    except FedhetError as error:
        raise ClaimsError(str(error)) from None
    unknown = sorted(set(raw) - {"protocol"})
    if unknown or not isinstance(raw.get("protocol"), dict) or not raw["protocol"]:
        raise _fail(str(path), "expected [protocol.NAME] tables only" + (f" (found {', '.join(unknown)})" if unknown else ""))
    # same_as may name a method of any protocol, before or after it in the file: resolve them all first.
    raw_methods = {f"{name}/{method}": values for name, table in raw["protocol"].items() if isinstance(table, dict)
                   and isinstance(table.get("method"), dict) for method, values in table["method"].items()
                   if isinstance(values, dict)}
    try:
        resolved = resolve_same_as(raw_methods)
    except SameAsError as error:
        raise _fail(str(path), str(error)) from None
    protocols: dict[str, Protocol] = {}
    methods_of: dict[str, dict[str, Method]] = {}
    for name, table in raw["protocol"].items():
        protocols[name] = _protocol(path, name, table, methods_of, resolved)
        methods_of[name] = protocols[name].methods
    return protocols


def _side(where: str, text: Any, protocols: Mapping[str, Protocol]) -> Side:
    if not isinstance(text, str) or text.count("/") != 1:
        raise _fail(where, f"{text!r}: write \"protocol/method\", e.g. \"fedaware_dir01/fedavg\"")
    protocol, method = text.split("/")
    if protocol not in protocols:
        raise _fail(where, f"{text!r}: no protocol {protocol!r}; protocols: {', '.join(protocols)}")
    if method not in protocols[protocol].methods:
        raise _fail(where, f"{text!r}: protocol {protocol} has no method {method!r}; "
                           f"its methods: {', '.join(protocols[protocol].methods)}")
    return Side(protocol, method)


def _number_field(where: str, table: Mapping[str, Any], defaults: Mapping[str, Any], key: str) -> Optional[float]:
    value = table.get(key, defaults.get(key))
    if value is None:
        return None
    if not _is_number(value) or not math.isfinite(value):
        raise _fail(where, f"{key} = {value!r}: a number")
    return float(value)


def _effect_fields(where: str, table: Mapping[str, Any], defaults: Mapping[str, Any], metric: str,
                   direction: str) -> tuple[float, str, Optional[float]]:
    """``delta``, ``role`` and ``target`` of one comparison (module docstring)."""
    delta = _number_field(where, table, defaults, "delta")
    if delta is None:
        raise _fail(where, "delta = ... is required: the minimal effect the paper's claim implies, in the metric's "
                           "units (0.01 = 1 accuracy point), set before any evaluation run")
    if delta < 0 or (delta == 0 and direction != "not_worse"):
        raise _fail(where, f"delta = {delta:g}: positive for a {direction} comparison (0 is allowed only for "
                           "not_worse)")
    role = table.get("role", "primary")
    if role not in ROLES:
        raise _fail(where, f"role = {role!r}; allowed: {', '.join(ROLES)}")
    target = _number_field(where, table, {}, "target")
    if target is not None:
        if metric != "rounds_to_target":
            raise _fail(where, "target is for a rounds_to_target comparison only")
        if not 0 < target <= 1:
            raise _fail(where, f"target = {target:g}: an accuracy in (0, 1], e.g. 0.85")
    return delta, role, target


def _metric_fields(where: str, table: Mapping[str, Any], defaults: Mapping[str, Any]) -> tuple[str, str, float]:
    metric = table.get("metric", defaults.get("metric"))
    direction = table.get("direction", defaults.get("direction"))
    margin = table.get("margin", defaults.get("margin", 0.0))
    if metric not in METRICS:
        raise _fail(where, f"metric = {metric!r}; allowed: {', '.join(METRICS)}")
    if direction not in DIRECTIONS:
        raise _fail(where, f"direction = {direction!r}; allowed: {', '.join(DIRECTIONS)}")
    if not isinstance(margin, (int, float)) or isinstance(margin, bool) or margin < 0:
        raise _fail(where, f"margin = {margin!r}: a non-negative number in the metric's units (0.01 = 1 point)")
    if direction != "not_worse" and margin != 0:
        raise _fail(where, f"margin = {margin}: only a not_worse comparison has a margin")
    if metric == "rounds_to_target" and direction != "less":
        raise _fail(where, "rounds_to_target is lower-is-better: use direction = \"less\"")
    if metric != "rounds_to_target" and direction == "less":
        raise _fail(where, f"{metric} is higher-is-better: use direction = \"greater\" or \"not_worse\"")
    return metric, direction, float(margin)


def load_claim(path: str | Path, protocols: Mapping[str, Protocol]) -> Claim:
    """Read one claim file against ``protocols``."""
    path = Path(path)
    try:
        raw = read_toml_file(path, key="claim")
    except FedhetError as error:
        raise ClaimsError(str(error)) from None
    where = str(path)
    unknown = sorted(set(raw) - _CLAIM_KEYS)
    if unknown:
        raise _fail(where, f"unknown key {', '.join(unknown)}; allowed: {', '.join(sorted(_CLAIM_KEYS))}")
    for key in ("id", "paper", "source", "statement", "paper_protocol", "here"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise _fail(where, f"{key} = \"...\" (text) is required")
    if not _ID.fullmatch(raw["id"]):
        raise _fail(where, f"id = {raw['id']!r}: lower-case letters, digits and -")
    if raw.get("quantifier") not in QUANTIFIERS:
        raise _fail(where, f"quantifier = {raw.get('quantifier')!r}: as the paper states the claim; allowed: "
                           f"{', '.join(QUANTIFIERS)} (docs/claims.md, \"The verdict rule\")")
    tables = raw.get("comparison")
    if not isinstance(tables, list) or not tables:
        raise _fail(where, "no [[comparison]] tables")
    comparisons = []
    for index, table in enumerate(tables, 1):
        here = f"{where}: comparison {index}"
        extra = sorted(set(table) - _COMPARISON_KEYS)
        if extra:
            raise _fail(here, f"unknown key {', '.join(extra)}; allowed: {', '.join(sorted(_COMPARISON_KEYS))}")
        method = _side(f"{here} method", table.get("method"), protocols)
        baseline = _side(f"{here} baseline", table.get("baseline"), protocols)
        if method == baseline:
            raise _fail(here, "method and baseline are the same runs")
        metric, direction, margin = _metric_fields(here, table, raw)
        delta, role, target = _effect_fields(here, table, raw, metric, direction)
        comparisons.append(Comparison(method, baseline, metric, direction, margin, str(table.get("paper", "")),
                                      delta, role, target))
    if not any(c.primary for c in comparisons):
        raise _fail(where, "no primary comparison: at least one comparison must enter the verdict "
                           "(role = \"primary\", the default)")
    failure_value = raw.get("failure_value")
    if failure_value is not None and (not _is_number(failure_value) or not 0.0 <= failure_value <= 1.0
                                      or not math.isfinite(failure_value)):
        raise _fail(where, f"failure_value = {failure_value!r}: an accuracy in [0, 1] given to a diverged run "
                           "(e.g. 0.1, chance on ten classes)")
    sides = {side for c in comparisons for side in (c.method, c.baseline)}
    headroom = _headroom(f"{where}: [headroom]", raw.get("headroom"), protocols, sides)
    pending = raw.get("pending")
    if pending is not None and (not isinstance(pending, str) or not pending.strip()):
        raise _fail(where, "pending = \"...\": which pre-registered step must still fix a value of the claim")
    return Claim(raw["id"], path, raw["paper"], raw["source"], raw["statement"], raw["paper_protocol"], raw["here"],
                 tuple(comparisons), raw["quantifier"],
                 None if failure_value is None else float(failure_value), headroom, pending)


def _headroom(where: str, table: Any, protocols: Mapping[str, Protocol], sides: set[Side]) -> Optional[Headroom]:
    if table is None:
        return None
    if not isinstance(table, dict):
        raise _fail(where, "a table: reference, baselines, metric, delta")
    unknown = sorted(set(table) - _HEADROOM_KEYS)
    if unknown:
        raise _fail(where, f"unknown key {', '.join(unknown)}; allowed: {', '.join(sorted(_HEADROOM_KEYS))}")
    reference = _side(f"{where} reference", table.get("reference"), protocols)
    names = table.get("baselines")
    if not isinstance(names, list) or not names:
        raise _fail(where, "baselines = [\"protocol/method\", ...]: the methods whose best must leave headroom")
    baselines = tuple(_side(f"{where} baselines", name, protocols) for name in names)
    outside = [side.text for side in (reference, *baselines) if side not in sides]
    if outside:
        raise _fail(where, f"{', '.join(outside)}: not a side of the claim's comparisons (a reported comparison "
                           "against the reference runs it with the claim)")
    metric = table.get("metric", "last_accuracy")
    if metric not in ("last_accuracy", "best_accuracy"):
        raise _fail(where, f"metric = {metric!r}; allowed: last_accuracy, best_accuracy")
    delta = table.get("delta")
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not delta > 0:
        raise _fail(where, f"delta = {delta!r}: the smallest headroom, in accuracy (0.01 = 1 point), > 0")
    return Headroom(reference, baselines, metric, float(delta))


def load_suite(directory: str | Path) -> ClaimsSuite:
    """``protocols.toml`` and every other ``*.toml`` of ``directory`` (claims, sorted by file name)."""
    directory = Path(directory)
    if not (directory / PROTOCOLS_FILE).is_file():
        raise ClaimsError(f"{directory}: not a claims directory (no {PROTOCOLS_FILE}); give --claims DIR, "
                          "e.g. configs/claims")
    protocols = load_protocols(directory / PROTOCOLS_FILE)
    claims = [load_claim(path, protocols) for path in sorted(directory.glob("*.toml"))
              if path.name not in (PROTOCOLS_FILE, TUNING_FILE)]
    ids = [claim.id for claim in claims]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise ClaimsError(f"{directory}: claim id given twice: {', '.join(twice)}")
    if not claims:
        raise ClaimsError(f"{directory}: no claim files next to {PROTOCOLS_FILE}")
    return ClaimsSuite(directory, protocols, tuple(claims))
