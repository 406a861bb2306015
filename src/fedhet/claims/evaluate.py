"""From run directories to verdicts: each side's per-seed values, the difference, the outcome, the gate.

A side (``protocol/method``) is the runs in ``OUT/<protocol>`` whose sweep label is the method. Only
**finished** runs count (a run still going or killed is reported as missing); the values per run are:

- ``last_accuracy``: mean test accuracy over the evaluated rounds of the last 10% of ``run.rounds``;
- ``best_accuracy``: the highest evaluated test accuracy;
- ``e_ludd``: the mean e-LUD over all rounds (the run's summary);
- ``rounds_to_target``: the first evaluated round whose accuracy reaches the comparison's ``target`` (or
  the base file's ``run.target_accuracy``), or ``run.rounds + 1`` when the run never reached it (a lower
  bound on the true value).

The difference is paired when the two sides' seeds pair (:func:`~fedhet.claims.planning.sides_pair`)
and Welch's otherwise; each comparison's outcome and the claim's verdict follow
:mod:`fedhet.claims.verdict`.

**The regime gate.** A claim gets a verdict only when every run it reads (both sides of every comparison,
primary or reported) is planned at or above its protocol's ``regime``, in the default or full tier (the
quick tier and a protocol without a ``regime`` never give one; :func:`~fedhet.claims.planning.regime_gaps`).
Otherwise the claim is
``not tested`` and so is each comparison; the outcome the rule would give is kept as the comparison's
``trend`` and shown (greyed) beside its difference and interval, never as a verdict.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from fedhet.claims.definitions import Claim, ClaimsSuite, Comparison, Side
from fedhet.claims.planning import plan_claims, protocol_dir, regime_gaps, sides_pair
from fedhet.claims.run_checks import usable
from fedhet.claims.verdict import INCONCLUSIVE, NOT_TESTED, claim_verdict, outcome
from fedhet.report.difference import Difference, paired_difference, welch_difference
from fedhet.report.runs import RunData, RunDirectoryError, collect_runs
from fedhet.report.stats import Stat, describe, run_metrics, run_rounds_to_target
from fedhet.sweep.plan import SweepPlan


@dataclasses.dataclass(frozen=True)
class SideValues:
    side: Side
    runs: tuple[RunData, ...]             # the side's finished runs, by seed
    values: dict[int, float]              # seed -> metric value
    stat: Stat                            # mean ± sample std over the seeds
    missing: int                          # planned seeds without a finished run
    lr_source: str


@dataclasses.dataclass(frozen=True)
class ComparisonResult:
    comparison: Comparison
    method: SideValues
    baseline: SideValues
    difference: Difference
    verdict: str                          # the outcome, or "not tested" below the regime
    note: str = ""
    trend: str = ""                       # below the regime: the outcome the rule would give (shown only)

    @property
    def shown_outcome(self) -> str:
        """The outcome word to colour by: the verdict, or the trend when not tested."""
        return self.trend if self.verdict == NOT_TESTED else self.verdict


@dataclasses.dataclass(frozen=True)
class ClaimResult:
    claim: Claim
    comparisons: tuple[ComparisonResult, ...]
    below_regime: tuple[str, ...] = ()     # "key = value < regime (protocol/method, ...)", when not tested

    @property
    def tested(self) -> bool:
        return not self.below_regime

    @property
    def trend(self) -> str:
        """The verdict the rule gives on the primary comparisons, whether or not the claim is tested."""
        return claim_verdict([c.shown_outcome for c in self.comparisons if c.comparison.primary],
                             self.claim.quantifier)

    @property
    def verdict(self) -> str:
        return self.trend if self.tested else NOT_TESTED


def metric_value(run: RunData, metric: str, target: Optional[float] = None) -> Optional[float]:
    """The run's value of ``metric`` (module docstring); None when the run has none."""
    if metric == "rounds_to_target":
        target = target if target is not None else run.config.run.target_accuracy
        if target is None:
            raise RunDirectoryError(f"{run.path}: a rounds_to_target comparison needs a target: `target` in the "
                                    "claim's comparison, or run.target_accuracy in the protocol's base file")
        reached = run_rounds_to_target(run, target)
        return float(reached) if reached is not None else float(run.config.run.rounds + 1)
    return run_metrics(run)[metric]


class RunIndex:
    """The finished runs of the protocols' directories, by (protocol, method, seed); read once."""

    def __init__(self, out_dir: Path, warn: Callable[[str], None], planned: Optional[Mapping[Path, Any]] = None):
        self.out_dir, self.warn = out_dir, warn
        self.planned = dict(planned or {})      # resolved run dir -> PlannedRun (run_checks.usable)
        self._runs: dict[str, dict[tuple[str, int], RunData]] = {}

    def runs(self, protocol: str) -> dict[tuple[str, int], RunData]:
        if protocol not in self._runs:
            directory = protocol_dir(self.out_dir, protocol)
            found: dict[tuple[str, int], RunData] = {}
            if directory.is_dir() and any(directory.iterdir()):
                try:
                    runs = collect_runs([directory], warn=self.warn)
                except RunDirectoryError as error:
                    self.warn(str(error))
                    runs = []
                for run in runs:
                    if run.complete and usable(run, self.planned, self.warn):
                        found[(run.label, run.seed)] = run
            self._runs[protocol] = found
        return self._runs[protocol]


def side_values(suite: ClaimsSuite, index: RunIndex, side: Side, comparison: Comparison, *,
                tier: str) -> SideValues:
    protocol = suite.protocols[side.protocol]
    seeds = protocol.run_seeds(tier=tier)
    runs = [index.runs(side.protocol).get((side.method, seed)) for seed in seeds]
    finished = tuple(run for run in runs if run is not None)
    values = {}
    for run in finished:
        value = metric_value(run, comparison.metric, comparison.target)
        if value is not None:
            values[run.seed] = value
    return SideValues(side, finished, values, describe(list(values.values())), len(seeds) - len(finished),
                      protocol.lr_source(side.method, tier=tier))


def compare(suite: ClaimsSuite, index: RunIndex, comparison: Comparison, plan: SweepPlan, *, tier: str,
            tested: bool = True) -> ComparisonResult:
    method = side_values(suite, index, comparison.method, comparison, tier=tier)
    baseline = side_values(suite, index, comparison.baseline, comparison, tier=tier)
    sides = ((comparison.method.protocol, comparison.method.method),
             (comparison.baseline.protocol, comparison.baseline.method))
    if sides[0][0] == sides[1][0] or sides_pair(plan, *sides):
        difference = paired_difference(method.values, baseline.values)
    else:
        difference = welch_difference(method.values, baseline.values)
    result = outcome(difference, comparison.direction, comparison.margin, comparison.delta)
    note = ""
    if difference.low is None:
        note = (f"{difference.n} paired seed(s): no interval" if difference.kind == "paired"
                else f"{difference.n_method} vs {difference.n_baseline} seeds: no interval")
    elif comparison.metric == "rounds_to_target" and _nobody_reached(method, baseline):
        result, note = INCONCLUSIVE, "no seed of either side reached the target"
    if tested:
        return ComparisonResult(comparison, method, baseline, difference, result, note)
    return ComparisonResult(comparison, method, baseline, difference, NOT_TESTED, note, trend=result)


def _nobody_reached(method: SideValues, baseline: SideValues) -> bool:
    def unreached(side: SideValues) -> bool:
        by_seed = {run.seed: run for run in side.runs}
        return all(value > by_seed[seed].config.run.rounds for seed, value in side.values.items())
    return unreached(method) and unreached(baseline)


def claim_gaps(claim: Claim, gaps: dict[tuple[str, str], list[str]]) -> tuple[str, ...]:
    """Why ``claim`` is below its regime, one line per reason: ``"key = value < regime (side, side)"``."""
    sides_of: dict[str, list[str]] = {}
    for comparison in claim.comparisons:
        for side in (comparison.method, comparison.baseline):
            for item in gaps.get((side.protocol, side.method), []):
                sides = sides_of.setdefault(item, [])
                if side.text not in sides:
                    sides.append(side.text)
    return tuple(f"{item} ({', '.join(sides)})" for item, sides in sides_of.items())


def evaluate_claims(suite: ClaimsSuite, claims: tuple[Claim, ...], out_dir: str | Path, *, tier: str = "default",
                    warn: Callable[[str], None] = lambda message: None) -> list[ClaimResult]:
    """Every comparison of ``claims`` judged on the finished runs of ``tier`` under ``out_dir``."""
    plan = plan_claims(suite, claims, out_dir, tier=tier)
    index = RunIndex(Path(out_dir), warn, {run.run_dir.resolve(): run for run in plan.runs})
    gaps = regime_gaps(suite, plan, tier=tier)
    results = []
    for claim in claims:
        below = claim_gaps(claim, gaps)
        results.append(ClaimResult(claim, tuple(compare(suite, index, c, plan, tier=tier, tested=not below)
                                                for c in claim.comparisons), below))
    return results
