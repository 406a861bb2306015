"""Which finished runs a claims report may use: those made with the current definitions and whose
records agree with their summary (docs/reliability.md, "Wrong results").

``claims run`` refuses a run directory whose ``config.toml`` differs from the planned run's; the report
must apply the same rule, or it would judge claims on runs made with edited definitions. A finished run
whose ``metrics.jsonl`` lost lines (torn, deleted) would silently change a paired difference; it is
left out as damaged, with a warning that says how to redo it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping, Optional

from fedhet.engine import scan_metrics
from fedhet.lab.report.runs import RunData
from fedhet.lab.sweep.plan import PlannedRun, config_differences


def damage(run: RunData) -> Optional[str]:
    """Why the records of a finished run disagree with its summary, or None."""
    scan = scan_metrics(run.path / "metrics.jsonl")
    if scan.bad_lines:
        return f"{len(scan.bad_lines)} unreadable line(s) in metrics.jsonl"
    rounds = (run.summary or {}).get("rounds")
    last = run.records[-1]["round"] if run.records else None
    if rounds is not None and last != rounds:      # the last round is always evaluated and recorded
        return f"its summary covers {rounds} rounds but metrics.jsonl ends at round {last}"
    return None


def usable(run: RunData, planned: Mapping[Path, PlannedRun], warn: Callable[[str], None]) -> bool:
    """Whether the report may use ``run`` (module docstring); warns about each run it leaves out."""
    plan = planned.get(run.path.resolve())
    if plan is not None:
        differences = config_differences(run.config, plan.config)
        if differences:
            warn(f"left out {run.path}: made with other definitions (its config.toml differs in "
                 f"{', '.join(differences[:5])}); rerun it with `fedhet claims run --overwrite`")
            return False
    problem = damage(run)
    if problem is not None:
        warn(f"left out {run.path} as damaged: {problem}; delete the directory and run `fedhet claims run` "
             "again to redo it")
        return False
    return True
