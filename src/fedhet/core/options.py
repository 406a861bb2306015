"""Typed, validated option dataclasses: the one way fedhet describes hyperparameters.

Every configurable component (a participation process, a local solver, a server method, a
partitioner, a dataset, a model) declares its hyperparameters as a frozen dataclass whose fields are
made with :func:`option`. :func:`build_options` turns a plain mapping (from TOML or ``--set``) into
an instance, rejecting unknown keys, wrong types and out-of-range values with a
:class:`ConfigError` that names the key, the value and what is allowed.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from typing import Any, Mapping

from fedhet.errors import FedhetError

_MISSING = dataclasses.MISSING


class ConfigError(FedhetError, ValueError):
    """A configuration value is wrong. ``str(error)`` names the key, the value and what is allowed."""

    def __init__(self, key: str, value: Any, allowed: str):
        self.key = key
        self.value = value
        self.allowed = allowed
        super().__init__(f"{key} = {value!r}: {allowed}")


def option(
    default: Any = _MISSING,
    *,
    help: str,
    symbol: str | None = None,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
    choices: typing.Sequence[Any] | None = None,
    default_factory: Any = _MISSING,
    allow_inf: bool = False,
) -> Any:
    """A dataclass field with documentation and range/choice constraints.

    ``symbol`` is the paper's notation (e.g. ``"eta_l"``), shown in ``fedhet options``.
    Numbers must be finite: NaN is never accepted, and ``inf``/``-inf`` only where ``allow_inf`` is
    set (an option whose infinity means something, such as a cutoff that never triggers).
    """
    metadata = {"help": help, "symbol": symbol, "gt": gt, "ge": ge, "lt": lt, "le": le,
                "choices": tuple(choices) if choices is not None else None, "allow_inf": allow_inf}
    if default_factory is not _MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def _type_name(tp: Any) -> str:
    if tp is type(None):
        return "none"
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(arg) for arg in typing.get_args(tp))
    if origin in (list, tuple):
        args = typing.get_args(tp)
        return f"list of {_type_name(args[0])}" if args else "list"
    if origin is dict or tp is dict:
        return "table"
    return getattr(tp, "__name__", str(tp))


class OverrideText(str):
    """A command-line override value: its raw text, plus the value the text means in TOML.

    ``--set run.name=nan`` must give the string "nan" to a string option, and
    ``--set client.learning_rate=0.1`` the number 0.1 to a float option.
    """

    parsed: Any

    def __new__(cls, text: str, parsed: Any):
        instance = super().__new__(cls, text)
        instance.parsed = parsed
        return instance


def _list_example(key: str, value: Any) -> str:
    """How to write ``value`` as a one-item list for ``key``, in a file and on the command line."""
    item = f'"{value}"' if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)
    return f"{key.split('.')[-1]} = [{item}] in the file, or --set '{key}=[{item}]'"


def _accepts_str(tp: Any) -> bool:
    return tp is str or (typing.get_origin(tp) in (typing.Union, types.UnionType) and str in typing.get_args(tp))


def _means_none(value: Any) -> bool:
    """Whether ``value`` writes none: None itself, or the text "none" or "null" (any case)."""
    return value is None or (isinstance(value, str) and value.lower() in ("none", "null"))


def _coerce(key: str, value: Any, tp: Any) -> Any:
    """Check ``value`` against the annotation ``tp``; ints are accepted where floats are."""
    if isinstance(value, OverrideText):
        # A quoted or plain string parses to itself; other text is literal only for string options.
        literal = _accepts_str(tp) and not isinstance(value.parsed, str) and value.lower() not in ("none", "null")
        value = str(value) if literal else value.parsed
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return _coerce_union(key, value, tp)
    if origin in (list, tuple):
        return _coerce_list(key, value, tp)
    if tp is Any:
        return value
    if origin is dict or tp is dict:
        return _coerce_table(key, value)
    return _coerce_scalar(key, value, tp)


def _coerce_union(key: str, value: Any, tp: Any) -> Any:
    """``value`` as the first member of the union ``tp`` that takes it; none first where ``tp`` allows it."""
    args = typing.get_args(tp)
    if type(None) in args and _means_none(value):
        return None
    for arg in args:
        try:
            return _coerce(key, value, arg)
        except ConfigError:
            continue
    raise ConfigError(key, value, f"expected {_type_name(tp)}")


def _coerce_list(key: str, value: Any, tp: Any) -> tuple:
    """A list (or tuple) option: each item checked against the item type, as a tuple."""
    if not isinstance(value, (list, tuple)):
        raise ConfigError(key, value, f"expected {_type_name(tp)}, e.g. {_list_example(key, value)}")
    (item_type, *_rest) = typing.get_args(tp) or (Any,)
    items = [_coerce(f"{key}[{i}]", item, item_type) for i, item in enumerate(value)]
    return tuple(items)


def _coerce_table(key: str, value: Any) -> dict:
    """A TOML table of plain values (e.g. a third-party class's keyword arguments); its keys
    are checked by the owning dataclass's validate()."""
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ConfigError(key, value, "expected a table (section.key = {name = value, ...})")
    return dict(value)


def _coerce_scalar(key: str, value: Any, tp: Any) -> Any:
    """``value`` as none, a boolean, an integer, a number or a string; a whole float is an integer
    only below 2**53, where it is exact."""
    if tp is type(None):
        if _means_none(value):
            return None
        raise ConfigError(key, value, "expected none")
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(key, value, "expected a boolean (true or false)")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
            return int(value)
        raise ConfigError(key, value, "expected an integer")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(key, value, "expected a number")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(key, value, "expected a string")
    raise TypeError(f"unsupported option type {tp!r} for {key}")


def _check_range(key: str, value: Any, meta: Mapping[str, Any]) -> None:
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        raise ConfigError(key, value, "allowed: " + ", ".join(repr(c) for c in choices))
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    _check_finite(key, value, meta)
    bounds = [("gt", ">", lambda v, b: v > b), ("ge", ">=", lambda v, b: v >= b),
              ("lt", "<", lambda v, b: v < b), ("le", "<=", lambda v, b: v <= b)]
    for name, text, ok in bounds:
        bound = meta.get(name)
        if bound is not None and not ok(value, bound):
            allowed = " and ".join(f"{t} {meta[n]}" for n, t, _ in bounds if meta.get(n) is not None)
            raise ConfigError(key, value, f"must be {allowed}")


def _check_finite(key: str, value: Any, meta: Mapping[str, Any]) -> None:
    """NaN is never a valid option value; infinity only where the option allows it (``allow_inf``)."""
    if not isinstance(value, float) or math.isfinite(value):
        return
    if value != value:
        raise ConfigError(key, value, "must be a number, not NaN")
    if not meta.get("allow_inf"):
        raise ConfigError(key, value, "must be finite (this option has no meaning at infinity)")


def option_fields(cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}


def _initials(name: str) -> str:
    return "".join(word[0] for word in name.split("_") if word)


def closest_key(key: str, allowed: typing.Sequence[str]) -> str | None:
    """The allowed key a mistyped ``key`` most likely meant: the closest spelling (difflib), else
    the key whose words' initials ``key`` is (``lr`` -> ``learning_rate``, ``bs`` -> ``batch_size``),
    else the one key that starts with ``key`` (``mom`` -> ``momentum``); None when nothing is close."""
    close = difflib.get_close_matches(key, list(allowed), n=1)
    if close:
        return close[0]
    compact = key.replace("_", "").lower()
    by_initials = [name for name in allowed if "_" in name and _initials(name) == compact]
    if len(by_initials) == 1:
        return by_initials[0]
    prefixed = [name for name in allowed if len(key) >= 2 and name.startswith(key)]
    return prefixed[0] if len(prefixed) == 1 else None


def build_options(cls: type, values: Mapping[str, Any], *, section: str) -> Any:
    """Instantiate the option dataclass ``cls`` from ``values``, validating every key.

    Unknown keys raise :class:`ConfigError` listing the allowed keys (and the closest match).
    After construction, ``instance.validate(section)`` runs when the class defines it, for rules
    that involve several fields.
    """
    fields = option_fields(cls)
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for key, value in values.items():
        full = f"{section}.{key}"
        if key not in fields:
            close = closest_key(key, list(fields))
            hint = f" (did you mean {section}.{close}?)" if close else ""
            raise ConfigError(full, value, f"unknown key{hint}; allowed keys: " + ", ".join(sorted(fields)))
        coerced = _coerce(full, value, hints[key])
        if isinstance(coerced, dict):
            pass
        elif coerced is not None and not isinstance(coerced, tuple):
            _check_range(full, coerced, fields[key].metadata)
        elif isinstance(coerced, tuple):
            for index, item in enumerate(coerced):
                _check_finite(f"{full}[{index}]", item, fields[key].metadata)
        kwargs[key] = coerced
    for name, f in fields.items():
        if name not in kwargs and f.default is _MISSING and f.default_factory is _MISSING:
            raise ConfigError(f"{section}.{name}", None, "required: " + f.metadata.get("help", ""))
    instance = cls(**kwargs)
    validate = getattr(instance, "validate", None)
    if callable(validate):
        validate(section)
    return instance


def refuse_inactive(options: Any, section: str, names: typing.Iterable[str], *, active: bool, condition: str) -> None:
    """Refuse option values that would be recorded without taking effect: while ``active`` is False,
    each field of ``names`` holding a value other than its default raises :class:`ConfigError`
    naming the field and ``condition``, the setting under which it takes effect (for a class's
    ``validate``; e.g. ``server.aware_alpha`` only with ``server.aware = true``). A default value
    is accepted, so a resolved configuration (which writes every field) still loads."""
    if active:
        return
    fields = option_fields(type(options))
    for name in names:
        field = fields[name]
        default = field.default if field.default_factory is dataclasses.MISSING else field.default_factory()
        value = getattr(options, name)
        if value != default:
            raise ConfigError(f"{section}.{name}", list(value) if isinstance(value, tuple) else value,
                              f"takes effect only when {condition}; remove it, or set that")


def options_to_dict(instance: Any) -> dict[str, Any]:
    """The options as a plain dict (tuples become lists), for saving the resolved config."""
    out = {}
    for f in dataclasses.fields(instance):
        value = getattr(instance, f.name)
        out[f.name] = list(value) if isinstance(value, tuple) else dict(value) if isinstance(value, dict) else value
    return out


def describe_options(cls: type) -> list[tuple[str, str, Any, str]]:
    """``(name, type, default, help)`` rows for documentation and ``fedhet options``."""
    hints = typing.get_type_hints(cls)
    rows = []
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not _MISSING else (
            f.default_factory() if f.default_factory is not _MISSING else "(required)")
        text = f.metadata.get("help", "")
        if f.metadata.get("symbol"):
            text = f"[{f.metadata['symbol']}] {text}"
        if f.metadata.get("choices"):
            text += " (one of: " + ", ".join(map(str, f.metadata["choices"])) + ")"
        rows.append((f.name, _type_name(hints[f.name]), default, text))
    return rows
