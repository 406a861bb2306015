"""The report's data: sections of rows of per-seed statistics, and the files it was written to.

Built by :func:`fedhet.lab.report.build.build_report`; read by the renderers
(:mod:`fedhet.lab.report.markdown`, :mod:`fedhet.lab.report.html`, :mod:`fedhet.lab.report.tables`),
which therefore import this module and not the report builder.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Optional

from fedhet.lab.report.grouping import Group, Section
from fedhet.lab.report.runs import RunData
from fedhet.lab.report.stats import Stat, TargetStat

# The common-setting keys a reader wants first, in this order (the rest are in report.json / HTML details).
HEADLINE_KEYS = ("data.name", "model.name", "partition.name", "partition.num_clients", "partition.alpha",
                 "participation.name", "participation.clients_per_round", "participation.pattern",
                 "participation.mean", "participation.floor", "run.rounds", "client.epochs", "client.steps",
                 "client.batch_size", "client.learning_rate", "server.learning_rate")


@dataclasses.dataclass
class Row:
    group: Group
    metrics: dict[str, Stat]
    targets: list[TargetStat]
    unfinished: int
    # Runs with a virtual clock: virtual seconds to each target (``values`` in seconds) and at the end.
    time_targets: list[TargetStat] = dataclasses.field(default_factory=list)
    virtual_seconds: Optional[Stat] = None

    @property
    def name(self) -> str:
        return self.group.display or self.group.label


@dataclasses.dataclass
class ReportSection:
    section: Section
    rows: list[Row]
    plots: dict[str, Path] = dataclasses.field(default_factory=dict)    # curve key -> PNG (after writing)
    partition_image: Optional[Path] = None
    participation_image: Optional[Path] = None
    image_run: Optional[Path] = None
    client_rows: list = dataclasses.field(default_factory=list)          # client_report.ClientRow per row
    client_plot: Optional[Path] = None
    baseline: Any = None              # report.baseline.BaselineTable with --baseline, else None
    baseline_plot: Optional[Path] = None

    @property
    def title(self) -> str:
        return self.section.title

    @property
    def clocked(self) -> bool:
        """Whether the section's rows carry virtual-clock columns (some run has a ``[system]`` clock)."""
        return any(row.virtual_seconds is not None for row in self.rows)


@dataclasses.dataclass
class Report:
    title: str
    sections: list[ReportSection]
    common: dict[str, Any]
    targets: tuple[float, ...]
    window: str                       # "last 10%" or "last 200 rounds"
    runs: list[RunData]
    warnings: list[str]
    # Small multiples (one panel per section, a fixed colour per method): curve key -> PNG, after writing.
    panels: dict[str, Path] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class ReportFiles:
    markdown: Path
    html: Path
    json: Path
    plots: tuple[Path, ...]
    csv: Optional[Path] = None
    latex: Optional[Path] = None


def headline_setting(common: dict[str, Any]) -> dict[str, Any]:
    return {key: common[key] for key in HEADLINE_KEYS if key in common}
