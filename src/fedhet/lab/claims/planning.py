"""The claims' runs as one sweep: every protocol's needed methods x its seeds, sharing runs across claims.

Each protocol is planned with :func:`fedhet.lab.sweep.plan.plan_sweep` (its base file, one variant per
method, its seeds) into ``OUT/<protocol>/``, and each run is named ``<protocol>__<method>__seed=<s>``
(protocols may share a base file, and the sweep keys its runs by name, so names must be unique); the plans are merged into one :class:`SweepPlan` so that a
single pool of jobs works through all of them (no core idles between protocols). A run that two claims
read (one FedAvg baseline for several comparisons) is planned once. Finished runs are skipped and
interrupted ones resumed by :func:`fedhet.lab.sweep.execute.run_sweep`.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from fedhet.lab.claims.definitions import PROTOCOLS_FILE, Claim, ClaimsError, ClaimsSuite
from fedhet.lab.sweep.grid import run_name
from fedhet.lab.sweep.plan import PlannedRun, SweepPlan, plan_sweep


def protocol_dir(out_dir: str | Path, protocol: str) -> Path:
    return Path(out_dir) / protocol


def plan_protocol(suite: ClaimsSuite, protocol: str, methods: list[str], out_dir: str | Path, *,
                  tier: str) -> SweepPlan:
    """The sweep of ``methods`` x seeds of one protocol in ``tier``, into ``out_dir/<protocol>``."""
    definition = suite.protocols[protocol]
    variants = [definition.variant(method, tier=tier) for method in methods]
    plan = plan_sweep(definition.base, variants=variants, seeds=definition.run_seeds(tier=tier),
                      out_dir=protocol_dir(out_dir, protocol))
    return dataclasses.replace(plan, base_name=protocol, runs=tuple(_renamed(run, protocol) for run in plan.runs))


def _renamed(run: PlannedRun, protocol: str) -> PlannedRun:
    """``run`` named after its protocol rather than its base file's ``run.name``."""
    name = run_name(protocol, variant=run.label, seed=run.seed)
    config = dataclasses.replace(run.config, run=dataclasses.replace(run.config.run, name=name))
    return dataclasses.replace(run, name=name, run_dir=run.run_dir.parent / name, config=config)


def plan_claims(suite: ClaimsSuite, claims: tuple[Claim, ...], out_dir: str | Path, *, tier: str) -> SweepPlan:
    """One plan holding every run the ``claims`` need in ``tier``, protocol by protocol in the protocols
    file's order."""
    runs = []
    for protocol, methods in suite.needed_methods(claims).items():
        runs.extend(plan_protocol(suite, protocol, methods, out_dir, tier=tier).runs)
    names = [run.name for run in runs]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:    # cannot happen with unique protocol and method names; the sweep would confuse these runs
        raise ClaimsError(f"two claims runs have the same name: {', '.join(twice)}")
    return SweepPlan(suite.directory / PROTOCOLS_FILE, "claims", Path(out_dir), tuple(runs))


def protocol_of(run: PlannedRun) -> str:
    """The protocol a planned claims run belongs to (its name is ``<protocol>__<method>__seed=<s>``)."""
    return run.name.split("__", 1)[0]


QUICK_GAP = "the quick tier, below every regime by definition"
# A method whose hyperparameters still await the pre-registered tuning (lr_source "pending: ...") runs at
# the papers' defaults: its comparisons are untuned, so no verdict (docs/claims.md, "No verdict on
# untuned step sizes either.").
PENDING_GAP = "hyperparameters pending the pre-registered tuning (scripts/tune_claims.sh)"
NO_REGIME_GAP = "its protocol declares no regime"


def regime_gaps(suite: ClaimsSuite, plan: SweepPlan, *, tier: str) -> dict[tuple[str, str], list[str]]:
    """``(protocol, method)`` -> why its planned runs are below the regime: the regime keys they miss
    (:meth:`Protocol.below_regime`), or that the tier is ``quick`` (never a verdict, whatever its values),
    or that the protocol declares no ``regime`` (no verdict without a stated regime), or that the method's
    hyperparameters are still pending their pre-registered tuning; absent when the method's runs are at
    or above the regime and tuned (or at the paper's published values)."""
    gaps: dict[tuple[str, str], list[str]] = {}
    for run in plan.runs:
        protocol, method = protocol_of(run), run.label
        assert method is not None               # every claims run is planned from its method's variant
        if tier == "quick":
            below = [QUICK_GAP]
        elif not suite.protocols[protocol].regime:
            below = [NO_REGIME_GAP]
        else:
            below = suite.protocols[protocol].below_regime(run.config.to_flat_dict())
            if suite.protocols[protocol].lr_source(method, tier=tier).startswith("pending"):
                below = [*below, PENDING_GAP]
        if below:
            seen = gaps.setdefault((protocol, method), [])
            seen.extend(item for item in below if item not in seen)
    return gaps


def sides_pair(plan: SweepPlan, first: tuple[str, str], second: tuple[str, str]) -> bool:
    """True when seed ``s`` of both sides (``(protocol, method)``) sees the same partition and participation
    (the same resolved ``data``, ``partition`` and ``participation`` sections and seed), so the per-seed
    differences pair; a side without planned runs pairs with nothing."""
    def keyed(side: tuple[str, str]) -> dict[int, tuple]:
        return {run.seed: (run.config.data, run.config.partition, run.config.participation)
                for run in plan.runs if (protocol_of(run), run.label) == side}
    one, two = keyed(first), keyed(second)
    common = set(one) & set(two)
    return bool(common) and all(one[seed] == two[seed] for seed in common)


def with_backend(plan, backend: str):
    """``plan`` with ``run.backend = backend`` in every run's configuration."""
    runs = tuple(dataclasses.replace(run, config=run.config.with_overrides({"run.backend": backend}))
                 for run in plan.runs)
    return dataclasses.replace(plan, runs=runs)
