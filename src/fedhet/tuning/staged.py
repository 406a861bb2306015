"""Running a pre-registered search (:mod:`fedhet.tuning.preregistered`): stages, the edge rule, the tables.

Each stage and each edge extension is one ``fedhet tune`` grid search (:func:`fedhet.tuning.search.run_search`)
in a directory of its own under ``OUT/<protocol>/<method>/``, so the whole plan resumes as ``fedhet tune``
does (finished trials are read back, interrupted ones resume from their checkpoints).

The edge rule (written in ``configs/claims/tuning.toml`` before any trial ran; the same for every method):
after a stage, while the best point so far sits at the low or high end of a knob whose ``extend`` is true and
that end has been extended fewer than ``max_extensions`` times, one point beyond that end
(:meth:`~fedhet.tuning.preregistered.Knob.beyond`) is crossed with the other knobs' current grids and run,
and the winner is chosen again over every point of the stage. The choice is
:func:`fedhet.tuning.criteria.select_best` over ``(point, criterion value)`` pairs: the test set never
enters it.
"""
from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any, Callable, Optional

from fedhet.tuning.criteria import Criterion, check_criterion, select_best
from fedhet.tuning.errors import TuneError
from fedhet.tuning.preregistered import Knob, Search, TuningPlan
from fedhet.tuning.results import COMPLETE, TrialRecord
from fedhet.tuning.search import SearchSettings, run_search
from fedhet.tuning.space import SearchParameter
from fedhet.tuning.trials import ConfigTrialRunner


@dataclasses.dataclass
class Point:
    """One grid point of a stage: its values, its outcome, where it ran."""

    stage: int
    values: dict[str, Any]
    state: str
    value: Optional[float]
    test_accuracy: Optional[float]
    directory: str


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


def _stage_trials(runner: ConfigTrialRunner, criterion: Criterion, knobs: tuple[Knob, ...],
                  grids: dict[str, tuple[float, ...]], directory: Path, jobs: int,
                  log: Callable[[str], None]) -> list[TrialRecord]:
    space = tuple(SearchParameter(knob.key, grids[knob.name]) for knob in knobs)
    settings = SearchSettings(space=space, criterion=criterion, sampler="grid", jobs=jobs)
    return run_search(settings, runner, directory, log=log).trials


def run_preregistered_search(plan: TuningPlan, search: Search, out_dir: str | Path, *, tier: str = "default",
                             jobs: int = 1, log: Callable[[str], None] = lambda message: None) -> SearchOutcome:
    """Run (or continue) one search of the plan in ``out_dir/<protocol>/<method>`` (module docstring)."""
    protocol = plan.protocols[search.protocol]
    seed = protocol.tuning_seed
    if seed is None:        # load_tuning_plan refuses a searched protocol without one
        raise TuneError(f"{search.target}: protocol {search.protocol} has no tuning_seed")
    fixed: dict[str, Any] = {**protocol.overrides(search.method, tier), "run.seed": seed}
    # Knobs of later stages sit at their start value while the earlier stages run (FedAU's gamma at eta = 1).
    for knob in search.knobs:
        if knob.start is not None:
            fixed[knob.key] = knob.start
    home = Path(out_dir) / search.protocol / search.method
    points: list[Point] = []
    extensions: list[str] = []
    horizon = 0
    for index, knobs in enumerate(search.stages, 1):
        base = ConfigTrialRunner(protocol.base, fixed, home / f"stage-{index}" / "trials").base
        horizon = base.run.rounds
        check_criterion(search.criterion, rounds=base.run.rounds, eval_every=base.run.eval_every,
                        validation_fraction=float(getattr(base.data.options, "validation_fraction", 0.0)),
                        global_train_loss_every=base.run.global_train_loss_every)
        grids = {knob.name: knob.values for knob in knobs}
        stage_points: list[Point] = []

        # The values the earlier stages chose, shown beside each point of this stage.
        earlier = {knob.key: fixed[knob.key] for stage in search.stages[:index - 1] for knob in stage}

        def run(directory: Path, grid: dict[str, tuple[float, ...]]) -> None:
            stage_runner = ConfigTrialRunner(protocol.base, fixed, directory / "trials")
            for trial in _stage_trials(stage_runner, search.criterion, knobs, grid, directory, jobs, log):
                stage_points.append(Point(index, {**earlier, **trial.values}, trial.state, trial.value,
                                          trial.test_accuracy, f"{directory.relative_to(home)}/{trial.name}"))

        log(f"{search.target}: stage {index} ({' x '.join(k.name for k in knobs)}), "
            f"{len(list(itertools.product(*grids.values())))} trials")
        run(home / f"stage-{index}", grids)
        done = {(knob.name, end): 0 for knob in knobs for end in ("low", "high")}
        while True:
            best = _best(stage_points, search.criterion)
            if best is None:
                raise TuneError(f"{search.target}: no trial of stage {index} completed; see {home}")
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
        fixed.update(best.values)
    chosen = {knob.key: fixed[knob.key] for knob in search.knobs}
    final = _best([p for p in points if p.stage == len(search.stages)], search.criterion)
    return SearchOutcome(search, tier, seed, horizon, points, chosen, final.value if final else None, extensions)


def _best(points: list[Point], criterion: Criterion) -> Optional[Point]:
    complete = [(i, p.value) for i, p in enumerate(points) if p.state == COMPLETE]
    index = select_best(complete, criterion)
    return None if index is None else points[index]
