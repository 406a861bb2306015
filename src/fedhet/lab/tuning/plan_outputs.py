"""The outputs of the claims' pre-registered tuning (``fedhet tune-claims``; docs/claims.md, "Tuning
(pre-registered)"), from the searches' outcomes (:mod:`fedhet.lab.tuning.staged`):

- :func:`results_markdown`: per search, every grid point's criterion, the chosen point marked, the edge
  extensions (``results.md``, for docs/claims.md);
- :func:`results_json`: the same as data (``results.json``);
- :func:`chosen_toml`: the chosen values with their ``lr_source``, to replace the "pending" values of
  ``protocols.toml`` (``chosen.toml``);
- :func:`describe_plan`: the searches and their trial counts (``--dry-run``).
"""
from __future__ import annotations

from typing import Optional, Sequence

from fedhet.config import toml_literal
from fedhet.lab.tuning.preregistered import TuningPlan
from fedhet.lab.tuning.staged import SearchOutcome


def display_value(value) -> str:
    """A value as the tables print it: empty for None, floats to 6 significant digits."""
    return "" if value is None else (f"{value:.6g}" if isinstance(value, float) else str(value))


def results_markdown(outcomes: Sequence[SearchOutcome], command: str) -> str:
    lines = ["# Tuning of the claims' methods (configs/claims/tuning.toml)", "",
             f"Produced by `{command}`. Every grid point's criterion; `*` marks the chosen point of each stage. "
             "The choice read only the criterion, never the test set.", ""]
    for outcome in outcomes:
        search = outcome.search
        keys = [knob.key for knob in search.knobs]
        lines += [f"## {search.target}", "",
                  f"criterion `{search.criterion.text}` ({search.criterion.direction}) at round {outcome.horizon}, "
                  f"tier {outcome.tier}, " + (f"run.seed {outcome.seed}" if len(outcome.seeds) < 2 else
                                              f"seeds {', '.join(map(str, outcome.seeds))} (the mean)")
                  + "; chosen: "
                  + ", ".join(f"`{k} = {display_value(v)}`" for k, v in outcome.chosen.items()), ""]
        if outcome.extensions:
            lines += ["edge rule: " + "; ".join(outcome.extensions), ""]
        if outcome.stability:
            lines += ["stability rule: " + "; ".join(outcome.stability), ""]
        lines += ["| stage | " + " | ".join(f"`{k}`" for k in keys) + f" | state | {search.criterion.text} | |",
                  "|" + " --- |" * (len(keys) + 4)]
        chosen_by_stage = {}
        for point in outcome.points:
            best = chosen_by_stage.get(point.stage)
            if point.state == "complete" and point.eligible is not False and (best is None or (
                    point.value > best.value if search.criterion.maximize else point.value < best.value)):
                chosen_by_stage[point.stage] = point
        for point in outcome.points:
            mark = "*" if chosen_by_stage.get(point.stage) is point else ""
            state = point.state + (" (next step unstable)" if point.eligible is False else "")
            seeds = (" (" + ", ".join(display_value(v) if v is not None else "failed" for v in point.per_seed.values()) + ")"
                     if len(point.per_seed) > 1 else "")
            lines.append(f"| {point.stage} | " + " | ".join(display_value(point.values.get(k)) for k in keys)
                         + f" | {state} | {display_value(point.value)}{seeds} | {mark} |")
        lines.append("")
    return "\n".join(lines)


def chosen_toml(outcomes: Sequence[SearchOutcome]) -> str:
    lines = ["# The chosen values (fedhet tune-claims): copy each table's keys into protocols.toml's method table."]
    for outcome in outcomes:
        search = outcome.search
        lines += ["", f"[protocol.{search.protocol}.method.{search.method}]",
                  f"lr_source = {toml_literal(f'tuned: tune_claims.sh, {search.criterion.text}@{outcome.horizon}, ' + _seeds_text(outcome))}"]
        lines += [f"{key} = {toml_literal(value)}" for key, value in outcome.chosen.items()]
    return "\n".join(lines) + "\n"


def _seeds_text(outcome: SearchOutcome) -> str:
    seeds = outcome.seeds or (outcome.seed,)
    return f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {', '.join(map(str, seeds))}"


def results_json(outcomes: Sequence[SearchOutcome]) -> dict:
    return {"searches": [{
        "search": o.search.target, "criterion": o.search.criterion.text, "direction": o.search.criterion.direction,
        "horizon": o.horizon, "tier": o.tier, "seed": o.seed, "seeds": list(o.seeds or (o.seed,)),
        "chosen": o.chosen, "chosen_value": o.chosen_value, "extensions": o.extensions, "stability": o.stability,
        "points": [{"stage": p.stage, "values": p.values, "state": p.state, "criterion": p.value,
                    "per_seed": {str(seed): value for seed, value in p.per_seed.items()}, "eligible": p.eligible,
                    "test_accuracy (not used)": p.test_accuracy, "directory": p.directory} for p in o.points]}
        for o in outcomes]}


def describe_plan(plan: TuningPlan, only: Optional[list[str]], tier: str) -> str:
    rows = []
    for search in plan.select(only):
        protocol = plan.protocols[search.protocol]
        stages = " then ".join(" x ".join(f"{k.name}{list(k.values)}" for k in stage) for stage in search.stages)
        seeds = search.seeds or (protocol.tuning_seed,)
        rows.append(f"{search.target}: {search.grid_size() * len(seeds)} trials before edge extensions"
                    + (" and stability checks" if search.stability else "") + f"; {stages}; "
                    f"criterion {search.criterion.text}; run.seed {', '.join(map(str, seeds))}"
                    + (f"; stability under {', '.join(search.stability)}" if search.stability else ""))
    total = sum(s.grid_size() * len(s.seeds or (0,)) for s in plan.select(only))
    return "\n".join(rows + [f"total: {total} trials (tier {tier}), before edge extensions"])
