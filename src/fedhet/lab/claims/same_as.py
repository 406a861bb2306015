"""``same_as``: a method of ``protocols.toml`` that takes another method's values and adds only its own keys.

Paired arms must share every hyperparameter: each xAWARE arm is its raw arm plus the AWARE extension, and the
hybrid paper's three settings run each method with the same values (FedAWARE AISTATS 2025 Table 2; hybrid
paper Appendix C.1; docs/claims.md, "Tuning (pre-registered)"). Writing the pair as

    [protocol.fedaware_dir01.method.fedavg_aware]
    same_as = "fedaware_dir01/fedavg"
    server.aware = true

makes that structural: the arm's table is the referenced method's resolved table (its configuration keys,
its ``quick`` / ``full`` tier tables and its ``lr_source``), plus the arm's own keys. The rule:

- the reference is ``"PROTOCOL/METHOD"`` of a method in the same file (chains are followed; a cycle or an
  unknown reference is an error);
- an own key may add a setting but never change one the referenced method sets (a tuned value cannot be
  overridden in one arm only); the same holds inside the tier tables;
- except the keys the arm declares in ``tuned = ["server.learning_rate", ...]``: those it searches on its own
  (an xAWARE arm's step size; the pre-registered tuning, :mod:`fedhet.lab.tuning.preregistered`), so they may
  differ from the reference's; an arm that declares them gives its own ``lr_source``;
- ``lr_source``, when the arm does not give one, is ``"<the reference's lr_source> (same_as
  PROTOCOL/METHOD)"``: it starts with the same word (``paper:``, ``tuned:``, ``pending:`` ...).

This module works on the raw TOML tables (before a protocols parser reads them), so any reader of
``protocols.toml`` can resolve the references the same way.
"""
from __future__ import annotations

from typing import Any, Mapping

from fedhet.errors import FedhetError

SAME_AS = "same_as"
TUNED = "tuned"
TIER_TABLES = ("quick", "full")


class SameAsError(FedhetError, ValueError):
    """A ``same_as`` reference cannot be resolved as written; the message names the method and the rule."""


def flat_keys(table: Mapping[str, Any]) -> dict[str, Any]:
    """A method table as dotted configuration keys: ``{"server": {"aware": True}}`` and
    ``{"server.aware": True}`` both give ``{"server.aware": True}``; the tier tables, ``lr_source`` and
    ``same_as`` are left out."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        if key in (SAME_AS, TUNED, "lr_source", *TIER_TABLES):
            continue
        if isinstance(value, Mapping) and "." not in key:
            flat.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    return flat


def _merge(where: str, reference: str, inherited: Mapping[str, Any], own: Mapping[str, Any],
           tuned: tuple[str, ...] = ()) -> dict[str, Any]:
    changed = sorted(k for k in own if k in inherited and own[k] != inherited[k] and k not in tuned)
    if changed:
        raise SameAsError(f"{where}: same_as = {reference!r} but it changes {', '.join(changed)} "
                          f"({', '.join(f'{k} = {inherited[k]!r} there' for k in changed)}); a paired arm shares "
                          "every value of its reference and may only add keys, or change those it declares in "
                          "tuned = [...]")
    return {**inherited, **own}


def resolve_same_as(methods: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """``{"protocol/method": raw table}`` -> the same with every ``same_as`` resolved (module docstring).

    A resolved table holds dotted configuration keys, ``lr_source``, the tier tables (as dotted keys) that
    apply, ``same_as`` (the reference as written, kept for reports and tests) and ``tuned`` when declared;
    tables without ``same_as`` come back as dotted keys too.
    """
    resolved: dict[str, dict[str, Any]] = {}

    def resolve(name: str, chain: tuple[str, ...]) -> dict[str, Any]:
        if name in resolved:
            return resolved[name]
        table = methods[name]
        where = f"[protocol.{name.replace('/', '.method.')}]"
        own = flat_keys(table)
        tiers = {tier: flat_keys(table.get(tier, {})) for tier in TIER_TABLES if tier in table}
        reference = table.get(SAME_AS)
        if reference is None and TUNED in table:
            raise SameAsError(f"{where}: tuned = [...] declares the keys a same_as arm searches apart from its "
                              "reference; this method has no same_as")
        if reference is None:
            result = {**own, **({"lr_source": table["lr_source"]} if "lr_source" in table else {}),
                      **{tier: values for tier, values in tiers.items()}}
        else:
            if not isinstance(reference, str) or reference.count("/") != 1:
                raise SameAsError(f"{where}: same_as = {reference!r}: write \"protocol/method\", "
                                  "e.g. \"fedaware_dir01/fedavg\"")
            if reference not in methods:
                raise SameAsError(f"{where}: same_as = {reference!r}: no such method in the file")
            if reference in chain or reference == name:
                raise SameAsError(f"{where}: same_as = {reference!r} refers back to itself "
                                  f"({' -> '.join((*chain, name, reference))})")
            tuned = _tuned(where, table.get(TUNED))
            if tuned and "lr_source" not in table:
                raise SameAsError(f"{where}: tuned = {list(tuned)!r}: an arm that searches its own values gives its "
                                  "own lr_source (\"pending: ...\" until its search has run)")
            base = resolve(reference, (*chain, name))
            result = _merge(where, reference, {k: v for k, v in base.items()
                                               if k not in (*TIER_TABLES, "lr_source", SAME_AS, TUNED)}, own, tuned)
            for tier in TIER_TABLES:
                if tier in base or tier in tiers:
                    result[tier] = _merge(f"{where} {tier}", reference, base.get(tier, {}), tiers.get(tier, {}),
                                          tuned)
            if tuned:
                result[TUNED] = list(tuned)
            lr_source = table.get("lr_source")
            if lr_source is None and "lr_source" in base:
                lr_source = f"{base['lr_source']} (same_as {reference})"
            if lr_source is not None:
                result["lr_source"] = lr_source
            result[SAME_AS] = reference
        resolved[name] = result
        return result

    for name in methods:
        resolve(name, ())
    return {name: resolved[name] for name in methods}


def _tuned(where: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not value or not all(isinstance(k, str) and "." in k for k in value):
        raise SameAsError(f"{where}: tuned = {value!r}: a list of dotted configuration keys, "
                          "e.g. [\"server.learning_rate\"]")
    return tuple(value)
