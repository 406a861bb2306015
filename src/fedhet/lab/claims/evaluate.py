"""From run directories to verdicts: each side's per-seed values, the difference, the outcome, the gate.

A side (``protocol/method``) is the runs in ``OUT/<protocol>`` whose sweep label is the method. Only
**finished** runs count (a run still going or killed is reported as missing); the values per run are:

- ``last_accuracy``: mean test accuracy over the evaluated rounds of the last 10% of ``run.rounds``;
- ``best_accuracy``: the highest evaluated test accuracy;
- ``e_ludd``: the mean e-LUD over all rounds (the run's summary);
- ``rounds_to_target``: the first evaluated round whose accuracy reaches the comparison's ``target`` (or
  the base file's ``run.target_accuracy``), or ``run.rounds + 1`` when the run never reached it (a lower
  bound on the true value);
- ``update_norm``, ``aware_cosine``: the mean over the evaluated rounds of the server's step length and of an
  AWARE arm's cosine (:mod:`fedhet.server.aware`); None when the run records none.

**Diverged runs.** A planned run that stopped because a round diverged leaves ``diverged.json`` in its
directory (:data:`fedhet.engine.run_handle.DIVERGED_FILE`). When the claim gives a ``failure_value`` (chance
accuracy), such a run enters an accuracy comparison with that value and is flagged ("diverged") instead of
being dropped, so a side whose runs diverge is not flattered by losing them; without one it is missing.

**The headroom gate.** A claim with a ``[headroom]`` table gets no verdict (``not tested: no headroom at this
scale``) when the best of its baselines' means ends within ``delta`` of the reference's (the same method on an
IID split): then the protocol leaves no method room to show a gain.

The difference is paired when the two sides' seeds pair (:func:`~fedhet.lab.claims.planning.sides_pair`)
and Welch's otherwise; each comparison's outcome and the claim's verdict follow
:mod:`fedhet.lab.claims.verdict`. :func:`settle` then applies the claim-level parts of the rule to one claim's
comparisons: a primary comparison whose two sides are each the same method in effect as those of an earlier
one (:func:`~fedhet.lab.claims.verdict.same_in_effect`) is marked a duplicate and not counted, and every counted
primary comparison gets its interval at the Bonferroni-adjusted level
(:func:`~fedhet.lab.claims.verdict.adjusted_confidence`), which alone can contradict an ``all`` claim.

**The regime gate.** A claim gets a verdict only when every run it reads (both sides of every comparison,
primary or reported) is planned at or above its protocol's ``regime``, in the default or full tier (the
quick tier and a protocol without a ``regime`` never give one; :func:`~fedhet.lab.claims.planning.regime_gaps`).
Otherwise the claim is
``not tested`` and so is each comparison; the outcome the rule would give is kept as the comparison's
``trend`` and shown (greyed) beside its difference and interval, never as a verdict.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from fedhet.engine import DIVERGED_FILE
from fedhet.lab.claims.definitions import Claim, ClaimsSuite, Comparison, Side
from fedhet.lab.claims.planning import PENDING_GAP, plan_claims, protocol_dir, regime_gaps, sides_pair
from fedhet.lab.claims.run_checks import usable
from fedhet.lab.claims.verdict import (
    INCONCLUSIVE,
    NOT_TESTED,
    adjusted_confidence,
    claim_verdict,
    oriented,
    outcome,
    same_in_effect,
)
from fedhet.lab.report.difference import Difference, paired_difference, welch_difference
from fedhet.lab.report.runs import RunData, RunDirectoryError, collect_runs
from fedhet.lab.report.stats import Stat, describe, run_metrics, run_rounds_to_target
from fedhet.lab.sweep.plan import SweepPlan

ACCURACY_METRICS = ("last_accuracy", "best_accuracy")
ROUND_MEANS = ("update_norm", "aware_cosine")        # per-round record keys averaged over a run
NO_HEADROOM = "no headroom at this scale"


@dataclasses.dataclass(frozen=True)
class SideValues:
    side: Side
    runs: tuple[RunData, ...]             # the side's finished runs, by seed
    values: dict[int, float]              # seed -> metric value
    stat: Stat                            # mean ± sample std over the seeds
    missing: int                          # planned seeds without a finished run (diverged ones included)
    lr_source: str
    diverged: tuple[int, ...] = ()        # seeds whose run diverged and entered with the failure value


@dataclasses.dataclass(frozen=True)
class ComparisonResult:
    comparison: Comparison
    method: SideValues
    baseline: SideValues
    difference: Difference
    verdict: str                          # the outcome, or "not tested" below the regime
    note: str = ""
    trend: str = ""                       # below the regime: the outcome the rule would give (shown only)
    adjusted: Optional[Difference] = None  # a counted primary comparison's interval at the adjusted level
    duplicate_of: str = ""                # a primary comparison the same in effect as this earlier one

    @property
    def shown_outcome(self) -> str:
        """The outcome word to colour by: the verdict, or the trend when not tested."""
        return self.trend if self.verdict == NOT_TESTED else self.verdict

    @property
    def counted(self) -> bool:
        """Whether it enters the claim's verdict: primary and not a duplicate."""
        return self.comparison.primary and not self.duplicate_of

    @property
    def adjusted_contradicted(self) -> bool:
        """Whether the adjusted interval, oriented, lies wholly on the other side of zero."""
        if self.adjusted is None:
            return False
        _mean, _low, high = oriented(self.adjusted, self.comparison.direction, self.comparison.margin)
        return high is not None and high < 0


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
        """The verdict the rule gives on the counted primary comparisons, whether or not the claim is tested."""
        counted = [c for c in self.comparisons if c.counted]
        return claim_verdict([c.shown_outcome for c in counted], self.claim.quantifier,
                             adjusted_contradicted=sum(c.adjusted_contradicted for c in counted))

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
    if metric in ROUND_MEANS:
        values = [float(r[metric]) for r in run.records if isinstance(r.get(metric), (int, float))
                  and math.isfinite(r[metric])]
        return sum(values) / len(values) if values else None
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

    def diverged(self, protocol: str, method: str, seed: int) -> bool:
        """Whether the planned run of ``(protocol, method, seed)`` stopped on a diverged round."""
        directory = protocol_dir(self.out_dir, protocol).resolve()
        for run_dir, run in self.planned.items():
            if run_dir.parent == directory and run.label == method and run.seed == seed:
                return (run_dir / DIVERGED_FILE).is_file()
        return False


def side_values(suite: ClaimsSuite, index: RunIndex, side: Side, comparison: Comparison, *,
                tier: str, failure_value: Optional[float] = None) -> SideValues:
    protocol = suite.protocols[side.protocol]
    seeds = protocol.run_seeds(tier=tier)
    runs = [index.runs(side.protocol).get((side.method, seed)) for seed in seeds]
    finished = tuple(run for run in runs if run is not None)
    values = {}
    for run in finished:
        value = metric_value(run, comparison.metric, comparison.target)
        if value is not None:
            values[run.seed] = value
    diverged: list[int] = []
    if failure_value is not None and comparison.metric in ACCURACY_METRICS:
        for seed in seeds:
            if seed not in values and index.diverged(side.protocol, side.method, seed):
                values[seed] = failure_value
                diverged.append(seed)
    values = dict(sorted(values.items()))
    return SideValues(side, finished, values, describe(list(values.values())), len(seeds) - len(finished),
                      protocol.lr_source(side.method, tier=tier), tuple(diverged))


def compare(suite: ClaimsSuite, index: RunIndex, comparison: Comparison, plan: SweepPlan, *, tier: str,
            tested: bool = True, failure_value: Optional[float] = None) -> ComparisonResult:
    method = side_values(suite, index, comparison.method, comparison, tier=tier, failure_value=failure_value)
    baseline = side_values(suite, index, comparison.baseline, comparison, tier=tier, failure_value=failure_value)
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
    flagged = [f"{side.side.method} seed {', '.join(map(str, side.diverged))} diverged: counted as "
               f"{100 * (failure_value or 0):g}%" for side in (method, baseline) if side.diverged]
    note = "; ".join(filter(None, [note, *flagged]))
    if tested:
        return ComparisonResult(comparison, method, baseline, difference, result, note)
    return ComparisonResult(comparison, method, baseline, difference, NOT_TESTED, note, trend=result)


def _same_side(first: SideValues, second: SideValues, delta: float) -> bool:
    if first.side == second.side:
        return True
    return first.side.protocol == second.side.protocol and same_in_effect(first.values, second.values, delta)


def _duplicate(earlier: ComparisonResult, later: ComparisonResult) -> bool:
    a, b = earlier.comparison, later.comparison
    if (a.metric, a.direction, a.margin, a.delta, a.target) != (b.metric, b.direction, b.margin, b.delta, b.target):
        return False
    return _same_side(earlier.method, later.method, a.delta) and _same_side(earlier.baseline, later.baseline, a.delta)


def settle(results: tuple[ComparisonResult, ...]) -> tuple[ComparisonResult, ...]:
    """One claim's comparisons with the duplicates marked and the adjusted intervals set (module docstring)."""
    settled: list[ComparisonResult] = []
    for result in results:
        original = next((earlier for earlier in settled if earlier.counted and _duplicate(earlier, result)), None)
        if result.comparison.primary and original is not None:
            c = original.comparison
            result = dataclasses.replace(
                result, duplicate_of=f"{c.method.text} vs {c.baseline.text}",
                note="; ".join(filter(None, [result.note, f"the same in effect as {c.method.method} vs "
                                                          f"{c.baseline.method}: counted once"])))
        settled.append(result)
    counted = [r for r in settled if r.counted]
    if not counted:
        return tuple(settled)
    confidence = adjusted_confidence(len(counted))

    def adjust(result: ComparisonResult) -> ComparisonResult:
        if not result.counted:
            return result
        method, baseline = result.method.values, result.baseline.values
        adjusted = (paired_difference(method, baseline, confidence) if result.difference.kind == "paired"
                    else welch_difference(method, baseline, confidence))
        return dataclasses.replace(result, adjusted=adjusted)

    return tuple(adjust(result) for result in settled)


def _nobody_reached(method: SideValues, baseline: SideValues) -> bool:
    def unreached(side: SideValues) -> bool:
        by_seed = {run.seed: run for run in side.runs}
        return all(value > by_seed[seed].config.run.rounds for seed, value in side.values.items())
    return unreached(method) and unreached(baseline)


def headroom_gap(suite: ClaimsSuite, index: RunIndex, claim: Claim, *, tier: str) -> Optional[str]:
    """Why ``claim`` has no headroom (module docstring), or None when it has (or has no gate, or its runs are
    not there yet: the gate reads finished runs only)."""
    gate = claim.headroom
    if gate is None:
        return None
    probe = Comparison(gate.reference, gate.reference, gate.metric, "greater", 0.0, "")

    def mean(side: Side) -> Optional[float]:
        return side_values(suite, index, side, probe, tier=tier).stat.mean

    reference = mean(gate.reference)
    baselines = {side.text: mean(side) for side in gate.baselines}
    known = {name: value for name, value in baselines.items() if value is not None}
    if reference is None or not known:
        return None
    best_name, best = max(known.items(), key=lambda item: item[1])
    if best < reference - gate.delta:
        return None
    return (f"{NO_HEADROOM}: the best baseline {best_name} ends at {100 * best:.2f}%, within "
            f"{100 * gate.delta:g} points of the IID reference {gate.reference.text} at {100 * reference:.2f}%")


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
        no_headroom = headroom_gap(suite, index, claim, tier=tier)
        if no_headroom:
            below = (*below, no_headroom)
        if claim.pending:
            below = (*below, f"{PENDING_GAP}: {claim.pending}")
        results.append(ClaimResult(claim, settle(tuple(compare(suite, index, c, plan, tier=tier, tested=not below,
                                                               failure_value=claim.failure_value)
                                                       for c in claim.comparisons)), below))
    return results
