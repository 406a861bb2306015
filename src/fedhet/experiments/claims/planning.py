"""The claims' runs as one sweep: every protocol's needed methods x its seeds, sharing runs across claims.

Each protocol is planned with :func:`fedhet.experiments.plan.plan_sweep` (its base file, one variant per
method, its seeds) into ``OUT/<protocol>/``; the plans are merged into one :class:`SweepPlan` so that a
single pool of jobs works through all of them (no core idles between protocols). A run that two claims
read (one FedAvg baseline for several comparisons) is planned once. Finished runs are skipped and
interrupted ones resumed by :func:`fedhet.experiments.sweep.run_sweep`.
"""
from __future__ import annotations

from pathlib import Path

from fedhet.experiments.claims.definitions import PROTOCOLS_FILE, Claim, ClaimsSuite
from fedhet.experiments.plan import SweepPlan, plan_sweep


def protocol_dir(out_dir: str | Path, protocol: str) -> Path:
    return Path(out_dir) / protocol


def plan_protocol(suite: ClaimsSuite, protocol: str, methods: list[str], out_dir: str | Path, *,
                  full: bool) -> SweepPlan:
    """The sweep of ``methods`` x seeds of one protocol, into ``out_dir/<protocol>``."""
    definition = suite.protocols[protocol]
    variants = [definition.variant(method, full=full) for method in methods]
    return plan_sweep(definition.base, variants=variants, seeds=definition.run_seeds(full=full),
                      out_dir=protocol_dir(out_dir, protocol))


def plan_claims(suite: ClaimsSuite, claims: tuple[Claim, ...], out_dir: str | Path, *, full: bool) -> SweepPlan:
    """One plan holding every run the ``claims`` need, protocol by protocol in the protocols file's order."""
    runs = []
    for protocol, methods in suite.needed_methods(claims).items():
        runs.extend(plan_protocol(suite, protocol, methods, out_dir, full=full).runs)
    return SweepPlan(suite.directory / PROTOCOLS_FILE, "claims", Path(out_dir), tuple(runs))
