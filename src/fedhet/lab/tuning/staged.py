"""Running a pre-registered search (:mod:`fedhet.lab.tuning.preregistered`): stages, the edge rule, the tables.

Each stage and each edge extension is one ``fedhet tune`` grid search (:func:`fedhet.lab.tuning.search.run_search`)
in a directory of its own under ``OUT/<protocol>/<method>/``, so the whole plan resumes as ``fedhet tune``
does (finished trials are read back, interrupted ones resume from their checkpoints).

**Tuning seeds.** A search with ``seeds`` runs every grid point on each of them; a point's criterion is the
mean over its seeds, and a point any of whose seeds failed (diverged) has failed.

**The stability rule** (``stability``; one knob per stage): a point is eligible only if the next larger value
of its knob finishes on every tuning seed in the search's protocol and in each listed protocol (the claim's
other participation patterns); the winner is the best eligible point (:func:`_stable`). A step one grid point
from divergence is thus never chosen.

The edge rule (written in ``configs/claims/tuning.toml`` before any trial ran; the same for every method):
after a stage, while the best point so far sits at the low or high end of a knob whose ``extend`` is true and
that end has been extended fewer than ``max_extensions`` times, one point beyond that end
(:meth:`~fedhet.lab.tuning.preregistered.Knob.beyond`) is crossed with the other knobs' current grids and run,
and the winner is chosen again over every point of the stage. The choice is
:func:`fedhet.lab.tuning.criteria.select_best` over ``(point, criterion value)`` pairs: the test set never
enters it.
"""
from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any, Callable, Optional

from fedhet.lab.tuning.criteria import Criterion, check_criterion, select_best
from fedhet.lab.tuning.errors import TuneError
from fedhet.lab.tuning.preregistered import Knob, Search, TuningPlan
from fedhet.lab.tuning.results import COMPLETE, TrialRecord
from fedhet.lab.tuning.search import SearchSettings, run_search
from fedhet.lab.tuning.space import SearchParameter
from fedhet.lab.tuning.trials import ConfigTrialRunner


@dataclasses.dataclass
class Point:
    """One grid point of a stage: its values, its outcome, where it ran (several tuning seeds: the mean)."""

    stage: int
    values: dict[str, Any]
    state: str
    value: Optional[float]
    test_accuracy: Optional[float]
    directory: str
    per_seed: dict[int, Optional[float]] = dataclasses.field(default_factory=dict)
    eligible: Optional[bool] = None              # the stability rule's verdict (None: not checked)


@dataclasses.dataclass
class SearchOutcome:
    search: Search
    tier: str
    seed: int
    horizon: int
    points: list[Point]
    chosen: dict[str, Any]                       # config key -> value
    chosen_value: Optional[float]
    extensions: list[str]                        # "stage 1: eta_g high -> 16" ...
    seeds: tuple[int, ...] = ()
    stability: list[str] = dataclasses.field(default_factory=list)   # what the stability rule found


def _stage_trials(runner: ConfigTrialRunner, criterion: Criterion, knobs: tuple[Knob, ...],
                  grids: dict[str, tuple[float, ...]], directory: Path, jobs: int,
                  log: Callable[[str], None]) -> list[TrialRecord]:
    space = tuple(SearchParameter(knob.key, grids[knob.name]) for knob in knobs)
    settings = SearchSettings(space=space, criterion=criterion, sampler="grid", jobs=jobs)
    return run_search(settings, runner, directory, log=log, require_complete=False).trials


def _combine(criterion: Criterion, by_seed: dict[int, TrialRecord]) -> tuple[str, Optional[float], Optional[float]]:
    """A point's state, criterion and test accuracy over its tuning seeds: complete only when every seed's
    trial is (a seed that diverged makes the point fail), the criterion the mean over the seeds."""
    records = list(by_seed.values())
    failed = next((r for r in records if r.state != COMPLETE), None)
    if failed is not None:
        return failed.state, criterion.worst(), None
    values = [float(r.value) for r in records if r.value is not None]
    tests = [r.test_accuracy for r in records if r.test_accuracy is not None]
    return (COMPLETE, sum(values) / len(values) if len(values) == len(records) else None,
            sum(tests) / len(tests) if len(tests) == len(records) else None)


def run_preregistered_search(plan: TuningPlan, search: Search, out_dir: str | Path, *, tier: str = "default",
                             jobs: int = 1, log: Callable[[str], None] = lambda message: None,
                             lockstep: str = "auto") -> SearchOutcome:
    """Run (or continue) one search of the plan in ``out_dir/<protocol>/<method>`` (module docstring).
    ``lockstep``: whether each grid's trials train together (:class:`~fedhet.lab.tuning.trials.ConfigTrialRunner`)."""
    protocol = plan.protocols[search.protocol]
    if protocol.tuning_seed is None:        # load_plan refuses a searched protocol without one
        raise TuneError(f"{search.target}: protocol {search.protocol} has no tuning_seed")
    seeds = search.seeds or (protocol.tuning_seed,)
    # One seed keeps the single-seed layout (stage-1/trials/...), which earlier plans' results are in.
    layout = {seed: (Path() if not search.seeds else Path(f"seed-{seed}")) for seed in seeds}
    fixed: dict[str, Any] = {**protocol.overrides(search.method, tier), **search.record}
    # Knobs of later stages sit at their start value while the earlier stages run (FedAU's gamma at eta = 1).
    for knob in search.knobs:
        if knob.start is not None:
            fixed[knob.key] = knob.start
    home = Path(out_dir) / search.protocol / search.method
    points: list[Point] = []
    extensions: list[str] = []
    stability_notes: list[str] = []
    horizon = 0
    best: Optional[Point] = None
    for index, knobs in enumerate(search.stages, 1):
        base = ConfigTrialRunner(protocol.base, {**fixed, "run.seed": seeds[0]}, home / f"stage-{index}" / "trials").base
        horizon = base.run.rounds
        check_criterion(search.criterion, rounds=base.run.rounds, eval_every=base.run.eval_every,
                        validation_fraction=float(getattr(base.data.options, "validation_fraction", 0.0)),
                        global_train_loss_every=base.run.global_train_loss_every)
        grids = {knob.name: knob.values for knob in knobs}
        stage_points: list[Point] = []

        # The values the earlier stages chose, shown beside each point of this stage.
        earlier = {knob.key: fixed[knob.key] for stage in search.stages[:index - 1] for knob in stage}

        def run(directory: Path, grid: dict[str, tuple[float, ...]]) -> None:
            by_point: dict[tuple, dict[int, TrialRecord]] = {}
            for seed in seeds:
                where = directory / layout[seed]
                stage_runner = ConfigTrialRunner(protocol.base, {**fixed, "run.seed": seed}, where / "trials",
                                                 lockstep=lockstep, log=log)
                for trial in _stage_trials(stage_runner, search.criterion, knobs, grid, where, jobs, log):
                    by_point.setdefault(tuple(sorted(trial.values.items())), {})[seed] = trial
            for key, by_seed in by_point.items():
                state, value, test = _combine(search.criterion, by_seed)
                first = by_seed[seeds[0]]
                stage_points.append(Point(index, {**earlier, **dict(key)}, state, value, test,
                                          f"{directory.relative_to(home)}/{layout[seeds[0]]}/{first.name}".replace(
                                              "/./", "/"), {seed: r.value if r.state == COMPLETE else None
                                                            for seed, r in by_seed.items()}))

        log(f"{search.target}: stage {index} ({' x '.join(k.name for k in knobs)}), "
            f"{len(list(itertools.product(*grids.values())))} trials x {len(seeds)} seed(s)")
        run(home / f"stage-{index}", grids)

        def eligible(point: Point) -> bool:
            return _stable(plan, search, tier, point, knobs[0], grids[knobs[0].name], index, fixed, seeds, home,
                           stage_points, jobs, log, stability_notes, lockstep)

        done = {(knob.name, end): 0 for knob in knobs for end in ("low", "high")}
        while True:
            best = _best(stage_points, search.criterion, eligible if search.stability else None)
            if best is None:
                raise TuneError(f"{search.target}: no trial of stage {index} completed"
                                + (" with a stable next step" if search.stability else "") + f"; see {home}")
            edge = next(((knob, end) for knob in knobs for end in ("low", "high")
                         if knob.extend and done[(knob.name, end)] < plan.max_extensions
                         and best.values[knob.key] == (grids[knob.name][0] if end == "low" else grids[knob.name][-1])),
                        None)
            if edge is None:
                break
            knob, end = edge
            current = dataclasses.replace(knob, values=grids[knob.name])
            point = current.beyond(end)
            if point is None:   # the knob extends (edge above); beyond needs the grid's two outermost values
                raise TuneError(f"{search.target}: knob {knob.name} has one grid value; the edge rule needs two")
            done[(knob.name, end)] += 1
            grids[knob.name] = (point, *grids[knob.name]) if end == "low" else (*grids[knob.name], point)
            extensions.append(f"stage {index}: {knob.name} at its {end} end -> {point:g}")
            log(f"{search.target}: edge rule: {extensions[-1]}")
            run(home / f"stage-{index}-{knob.name}-{end}-{done[(knob.name, end)]}",
                {**grids, knob.name: (point,)})
        points.extend(stage_points)
        fixed.update({k: v for k, v in best.values.items()})
    chosen = {knob.key: fixed[knob.key] for knob in search.knobs}
    final = best if best is not None and best.stage == len(search.stages) else None
    return SearchOutcome(search, tier, seeds[0], horizon, points, chosen, final.value if final else None, extensions,
                         tuple(seeds), stability_notes)


def _stable(plan: TuningPlan, search: Search, tier: str, point: Point, knob: Knob, grid: tuple[float, ...],
            index: int, fixed: dict[str, Any], seeds: tuple[int, ...], home: Path, stage_points: list[Point],
            jobs: int, log: Callable[[str], None], notes: list[str], lockstep: str) -> bool:
    """The stability rule (docs/claims.md, "Tuning"): ``point`` is eligible only when the next larger value of
    its stage's knob (the next grid value, or the grid's ratio beyond its last) finishes on every tuning seed
    in the search's protocol and in every protocol of ``search.stability``. Trials it needs are run once, in
    ``stage-N-stability/PROTOCOL/KNOB-STEP/``, and read back afterwards."""
    if point.eligible is not None:
        return point.eligible
    value = point.values[knob.key]
    larger = [v for v in sorted(grid) if v > value]
    step = larger[0] if larger else dataclasses.replace(knob, values=tuple(sorted(grid)), extend=True).beyond("high")
    if step is None:
        raise TuneError(f"{search.target}: knob {knob.name} needs two grid values for the stability rule")
    others = {k: v for k, v in point.values.items() if k != knob.key}
    failures = []
    for protocol_name in (search.protocol, *search.stability):
        own = next((p for p in stage_points if p.values.get(knob.key) == step), None)
        if protocol_name == search.protocol and own is not None:
            failures += [f"{protocol_name} seed {s}" for s, v in own.per_seed.items() if v is None]
            continue
        protocol = plan.protocols[protocol_name]
        sets = {**protocol.overrides(search.method, tier), **search.record, **others}
        for seed in seeds:
            # One directory per step: a search directory holds one space, and several candidates are checked.
            where = home / f"stage-{index}-stability" / protocol_name / f"{knob.name}-{step:g}" / f"seed-{seed}"
            runner = ConfigTrialRunner(protocol.base, {**sets, "run.seed": seed}, where / "trials",
                                       lockstep=lockstep, log=log)
            (trial,) = _stage_trials(runner, search.criterion, (knob,), {knob.name: (step,)}, where, jobs, log)
            if trial.state != COMPLETE:
                failures.append(f"{protocol_name} seed {seed}")
    point.eligible = not failures
    verdict = "eligible" if point.eligible else f"not eligible: it failed in {', '.join(failures)}"
    notes.append(f"stage {index}: {knob.name} = {value:g}: the next larger step {step:g} {verdict}")
    log(f"{search.target}: stability: {notes[-1]}")
    return point.eligible


def _best(points: list[Point], criterion: Criterion,
          eligible: Optional[Callable[[Point], bool]] = None) -> Optional[Point]:
    """The best complete point (ties: the earlier); with ``eligible``, the best that passes it, checked from
    the best down so that only the candidates that could win are checked."""
    complete = [(i, p.value) for i, p in enumerate(points) if p.state == COMPLETE]
    while complete:
        index = select_best(complete, criterion)
        if index is None:
            return None
        if eligible is None or eligible(points[index]):
            return points[index]
        complete = [(i, v) for i, v in complete if i != index]
    return None
