"""The claims' pre-registered tuning plan: ``configs/claims/tuning.toml`` read against ``protocols.toml``.

The plan (its file's header gives the rules in words; docs/claims.md, "Tuning (pre-registered)"):

- ``max_extensions``: the edge rule's limit (:mod:`fedhet.lab.tuning.staged`);
- ``[knob.NAME]``: ``key`` (a configuration key), ``values`` (the grid, ascending), ``extend`` (whether the
  edge rule may add points beyond its ends) and optionally ``start`` (its value while an earlier stage runs);
- ``[search."PROTOCOL/METHOD"]``: ``criterion`` (:mod:`fedhet.lab.tuning.criteria`; without ``@ROUND`` it is read
  at the horizon, which is the evaluation horizon) and ``stages``, a list of lists of knob names.

Each search's trials run the method as the protocol runs it in the chosen tier (base file < ``set`` < the
method's keys < the protocol's tier table < the method's tier table, ``same_as`` resolved by
:mod:`fedhet.lab.claims.same_as`), with ``run.seed`` = the protocol's ``tuning_seed``. Loading checks
what the pre-registration promises: the tuning seed is none of the protocol's evaluation seeds, a searched
method exists and is not a reused one (``methods_from``), a paired arm (``same_as``) searches only the keys it
declares in ``tuned`` (every other value stays its reference's), no configuration key is searched twice, and the criterion is read at the horizon (no ``@ROUND``). A knob's key that the method
cannot take is refused when its first trial's configuration is built.

The protocols are read here from the raw TOML (a small reader of the keys tuning needs:
``base``, ``set``, the tier tables, the seeds, ``tuning_seed``, ``methods_from`` and the methods), so that the
plan does not depend on the claims suite's own parser.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Mapping, Optional

from fedhet.config import read_toml_file
from fedhet.lab.claims.same_as import TIER_TABLES, SameAsError, flat_keys, resolve_same_as
from fedhet.lab.tuning.criteria import Criterion, parse_criterion
from fedhet.lab.tuning.errors import TuneError

TIERS = ("default", "quick", "full")
_SEED_KEYS = {"default": "seeds", "quick": "quick_seeds", "full": "full_seeds"}


@dataclasses.dataclass(frozen=True)
class Knob:
    name: str
    key: str
    values: tuple[float, ...]
    extend: bool
    start: Optional[float] = None

    def beyond(self, end: str) -> Optional[float]:
        """The next grid point past the ``"low"`` / ``"high"`` end: the grid's own ratio there (its two
        outermost values; 6 significant digits); None when the knob is not extended."""
        if not self.extend or len(self.values) < 2:
            return None
        a, b = (self.values[1], self.values[0]) if end == "low" else (self.values[-2], self.values[-1])
        return float(f"{b * (b / a):.6g}") if a > 0 and b > 0 else float(f"{b + (b - a):.6g}")


@dataclasses.dataclass(frozen=True)
class ProtocolTables:
    """What tuning needs of one ``[protocol.NAME]``."""

    name: str
    base: Path
    sets: dict[str, Any]
    tiers: dict[str, dict[str, Any]]            # "quick" / "full" -> dotted keys
    seeds: dict[str, tuple[int, ...]]           # tier -> evaluation seeds
    tuning_seed: Optional[int]
    methods: dict[str, dict[str, Any]]          # method -> resolved table (same_as.resolve_same_as)
    methods_from: Optional[str]

    def overrides(self, method: str, tier: str) -> dict[str, Any]:
        """The values a run of ``method`` applies over the base file in ``tier`` (module docstring)."""
        table = self.methods[method]
        own = {k: v for k, v in table.items() if k not in (*TIER_TABLES, "lr_source", "same_as", "tuned")}
        if tier == "default":
            return {**self.sets, **own}
        return {**self.sets, **own, **self.tiers.get(tier, {}), **table.get(tier, {})}


# Keys a search may add to its trials beyond the protocol's: they change what a run records, never what it
# trains (a windowed criterion needs its metric recorded more often than the evaluation runs do).
RECORDING_KEYS = ("run.global_train_loss_every",)


@dataclasses.dataclass(frozen=True)
class Search:
    protocol: str
    method: str
    criterion: Criterion
    stages: tuple[tuple[Knob, ...], ...]
    seeds: tuple[int, ...] = ()                # tuning seeds; () = the protocol's tuning_seed alone
    record: dict[str, Any] = dataclasses.field(default_factory=dict)   # RECORDING_KEYS
    stability: tuple[str, ...] = ()            # other protocols where the next larger step must finish too

    @property
    def target(self) -> str:
        return f"{self.protocol}/{self.method}"

    @property
    def knobs(self) -> tuple[Knob, ...]:
        return tuple(knob for stage in self.stages for knob in stage)

    def grid_size(self) -> int:
        """Trials of the stages before any edge extension."""
        return sum(math.prod(len(k.values) for k in stage) for stage in self.stages)


@dataclasses.dataclass(frozen=True)
class TuningPlan:
    path: Path
    knobs: dict[str, Knob]
    searches: tuple[Search, ...]
    max_extensions: int
    protocols: dict[str, ProtocolTables]

    def select(self, only: Optional[list[str]]) -> tuple[Search, ...]:
        if only is None:
            return self.searches
        known = [s.target for s in self.searches]
        unknown = [o for o in only if o not in known]
        if unknown:
            raise TuneError(f"--only {','.join(unknown)}: no such search; searches: {', '.join(known)}")
        return tuple(s for s in self.searches if s.target in only)


def _seeds(where: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in value):
        raise TuneError(f"{where}: {value!r}: a list of integers")
    return tuple(value)


def load_protocol_tables(path: str | Path) -> dict[str, ProtocolTables]:
    """The protocols of ``protocols.toml`` as tuning reads them (module docstring)."""
    path = Path(path)
    raw = read_toml_file(path, key="protocols").get("protocol")
    if not isinstance(raw, dict) or not raw:
        raise TuneError(f"{path}: expected [protocol.NAME] tables")
    methods: dict[str, Mapping[str, Any]] = {}
    for name, table in raw.items():
        source = table.get("methods_from", name)
        if source not in raw or not isinstance(raw[source].get("method"), dict):
            raise TuneError(f"{path}: [protocol.{name}] methods_from = {source!r}: not a protocol with methods")
        for method, method_table in raw[source]["method"].items():
            methods[f"{name}/{method}"] = method_table
    try:
        resolved = resolve_same_as(methods)
    except SameAsError as error:
        raise TuneError(f"{path}: {error}") from None
    protocols = {}
    for name, table in raw.items():
        where = f"{path}: [protocol.{name}]"
        seeds = {tier: _seeds(f"{where} {key}", table[key]) for tier, key in _SEED_KEYS.items() if key in table}
        seeds.setdefault("full", seeds.get("default", ()))
        tuning_seed = table.get("tuning_seed")
        protocols[name] = ProtocolTables(
            name, (path.parent / table["base"]).resolve(), flat_keys(table.get("set", {})),
            {tier: flat_keys(table.get(tier, {})) for tier in TIER_TABLES}, seeds, tuning_seed,
            {key.split("/", 1)[1]: value for key, value in resolved.items() if key.startswith(f"{name}/")},
            table.get("methods_from"))
    return protocols


def _knob(path: Path, name: str, table: Any) -> Knob:
    where = f"{path}: [knob.{name}]"
    if not isinstance(table, dict) or not isinstance(table.get("key"), str):
        raise TuneError(f"{where}: key = \"section.key\" is required")
    values = table.get("values")
    if (not isinstance(values, list) or len(values) < 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
            or sorted(values) != values or len(set(values)) != len(values)):
        raise TuneError(f"{where}: values = {values!r}: at least two distinct numbers in ascending order")
    extend = table.get("extend")
    if not isinstance(extend, bool):
        raise TuneError(f"{where}: extend = true or false (whether the edge rule may add points) is required")
    unknown = sorted(set(table) - {"key", "values", "extend", "start"})
    if unknown:
        raise TuneError(f"{where}: unknown key {', '.join(unknown)}; allowed: key, values, extend, start")
    return Knob(name, table["key"], tuple(float(v) for v in values), extend,
                float(table["start"]) if "start" in table else None)


def load_plan(path: str | Path, protocols_path: str | Path | None = None) -> TuningPlan:
    """Read and check ``tuning.toml`` (module docstring); ``protocols_path`` defaults to the
    ``protocols.toml`` beside it."""
    path = Path(path)
    raw = read_toml_file(path, key="tuning plan")
    unknown = sorted(set(raw) - {"max_extensions", "knob", "search"})
    if unknown:
        raise TuneError(f"{path}: unknown key {', '.join(unknown)}; allowed: max_extensions, knob, search")
    protocols = load_protocol_tables(protocols_path or path.parent / "protocols.toml")
    knobs = {name: _knob(path, name, table) for name, table in (raw.get("knob") or {}).items()}
    max_extensions = raw.get("max_extensions")
    if not isinstance(max_extensions, int) or isinstance(max_extensions, bool) or max_extensions < 0:
        raise TuneError(f"{path}: max_extensions = {max_extensions!r}: a whole number >= 0 (the edge rule's limit)")
    searches = [_search(f"{path}: [search.\"{target}\"]", target, table, knobs, protocols)
                for target, table in (raw.get("search") or {}).items()]
    if not searches:
        raise TuneError(f"{path}: no [search.\"PROTOCOL/METHOD\"] tables")
    return TuningPlan(path, knobs, tuple(searches), max_extensions, protocols)


def _search(where: str, target: str, table: Any, knobs: Mapping[str, Knob],
            protocols: Mapping[str, ProtocolTables]) -> Search:
    """One ``[search."PROTOCOL/METHOD"]`` table, checked as the module docstring says; the first check that
    fails raises."""
    protocol_name, method, protocol = _search_target(where, target, protocols)
    stages = _search_stages(where, table, knobs, protocol.methods[method])
    criterion = parse_criterion(str(table.get("criterion", "")))
    if criterion.round is not None:
        raise TuneError(f"{where}: criterion = {criterion.text!r}: write it without @ROUND; the "
                        "horizon is the protocol's (tuning horizon = evaluation horizon)")
    unknown = sorted(set(table) - {"criterion", "stages", "seeds", "record", "stability"})
    if unknown:
        raise TuneError(f"{where}: unknown key {', '.join(unknown)}; allowed: criterion, stages, seeds, record, "
                        "stability")
    seeds = _search_seeds(where, table, protocol_name, protocols)
    record = table.get("record", {})
    if not isinstance(record, dict) or not set(record) <= set(RECORDING_KEYS):
        raise TuneError(f"{where}: record = {record!r}: only keys that change what a trial records, not what "
                        f"it trains: {', '.join(RECORDING_KEYS)}")
    stability = _search_stability(where, table, method, stages, protocols)
    return Search(protocol_name, method, criterion, stages, seeds, dict(record), stability)


def _search_target(where: str, target: str,
                   protocols: Mapping[str, ProtocolTables]) -> tuple[str, str, ProtocolTables]:
    """The protocol and method of ``PROTOCOL/METHOD``: a method the protocol declares itself (not through
    ``methods_from``), in a protocol whose tuning seed is none of its evaluation seeds."""
    protocol_name, _, method = target.partition("/")
    protocol = protocols.get(protocol_name)
    if protocol is None or method not in protocol.methods:
        raise TuneError(f"{where}: no method {target!r} in the protocols file")
    if protocol.methods_from:
        raise TuneError(f"{where}: protocol {protocol_name} reuses {protocol.methods_from}'s methods "
                        f"(methods_from); search {protocol.methods_from}/{method} instead")
    if not isinstance(protocol.tuning_seed, int) or protocol.tuning_seed in {
            s for seeds in protocol.seeds.values() for s in seeds}:
        raise TuneError(f"{where}: protocol {protocol_name} needs a tuning_seed that is none of its "
                        f"evaluation seeds (tuning_seed = {protocol.tuning_seed!r}, seeds "
                        f"{sorted({s for seeds in protocol.seeds.values() for s in seeds})})")
    return protocol_name, method, protocol


def _search_stages(where: str, table: Any, knobs: Mapping[str, Knob],
                   method_table: Mapping[str, Any]) -> tuple[tuple[Knob, ...], ...]:
    """The search's stages as knobs: known knob names; a paired arm (``same_as``) searches only the keys it
    declares in ``tuned``; no configuration key searched by two knobs."""
    stages = table.get("stages")
    if (not isinstance(stages, list) or not stages
            or not all(isinstance(stage, list) and stage for stage in stages)):
        raise TuneError(f"{where}: stages = [[\"KNOB\", ...], ...]: one or more non-empty lists of knob names")
    missing = sorted({k for stage in stages for k in stage if k not in knobs})
    if missing:
        raise TuneError(f"{where}: no knob {', '.join(missing)}; knobs: {', '.join(knobs)}")
    resolved = tuple(tuple(knobs[k] for k in stage) for stage in stages)
    if "same_as" in method_table:
        own_keys = set(method_table.get("tuned", ()))
        searched = {knobs[k].key for stage in stages for k in stage}
        if not own_keys or not searched <= own_keys:
            raise TuneError(f"{where}: a paired arm (same_as = {method_table['same_as']!r}) takes its reference's "
                            f"values; it may search only the keys it declares in tuned = [...] "
                            f"(declared: {sorted(own_keys) or 'none'}; searched: {sorted(searched)})")
    keys = [knob.key for stage in resolved for knob in stage]
    if len(set(keys)) != len(keys):
        raise TuneError(f"{where}: a configuration key is searched by two knobs")
    return resolved


def _search_seeds(where: str, table: Any, protocol_name: str,
                  protocols: Mapping[str, ProtocolTables]) -> tuple[int, ...]:
    """The search's own tuning seeds: distinct, none of them an evaluation seed of its protocol or of a
    protocol in its ``stability`` list."""
    seeds = _seeds(f"{where} seeds", table["seeds"]) if "seeds" in table else ()
    evaluated = {s for name in (protocol_name, *table.get("stability", ()))
                 if name in protocols for seeds_ in protocols[name].seeds.values() for s in seeds_}
    if set(seeds) & evaluated or len(set(seeds)) != len(seeds):
        raise TuneError(f"{where}: seeds = {list(seeds)}: distinct tuning seeds, none of them an evaluation seed "
                        f"({sorted(evaluated)})")
    return seeds


def _search_stability(where: str, table: Any, method: str, stages: tuple[tuple[Knob, ...], ...],
                      protocols: Mapping[str, ProtocolTables]) -> tuple[str, ...]:
    """The protocols of the stability rule: each has the method, and each stage has one knob (its next larger
    step)."""
    stability = table.get("stability", [])
    if not isinstance(stability, list) or not all(isinstance(name, str) for name in stability):
        raise TuneError(f"{where}: stability = [\"PROTOCOL\", ...]: the protocols in which a point's next larger "
                        "step must also finish")
    for name in stability:
        if name not in protocols or method not in protocols[name].methods:
            raise TuneError(f"{where}: stability protocol {name!r} has no method {method!r}")
    if stability and any(len(stage) != 1 for stage in stages):
        raise TuneError(f"{where}: the stability rule needs one knob per stage (its next larger step)")
    return tuple(stability)
