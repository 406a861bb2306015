"""`fedhet report` on runs with a virtual clock: virtual seconds to a target and at the end in the table, the
paired comparison of the seconds to the target with --baseline (fewer is better), against hand computations."""
from __future__ import annotations

import json
import math

import pytest

from fedhet.lab.report.build import build_report, write_report
from fedhet.lab.report.runs import collect_runs
from fedhet.lab.report.tables import baseline_cells, section_cells

ROUNDS = [1, 2, 3]
T_975_2 = 4.302652729911275       # Student-t 0.975 quantile, 2 degrees of freedom (statistical tables)
# Per label and seed: (accuracies at rounds 1, 2, 3; virtual seconds at those rounds).
RUNS = {"sync": {1: ([0.5, 0.72, 0.75], [40, 80, 120]), 2: ([0.71, 0.72, 0.8], [50, 90, 130]),
                 3: ([0.5, 0.6, 0.71], [45, 85, 125])},
        "fedbuff": {1: ([0.7, 0.72, 0.73], [10, 20, 30]), 2: ([0.6, 0.7, 0.74], [12, 22, 32]),
                    3: ([0.5, 0.6, 0.65], [11, 21, 31])}}


def clocked_runs(root, fake_run, labels=("sync", "fedbuff")):
    for label in labels:
        for seed, (accuracies, seconds) in RUNS[label].items():
            run_dir = fake_run(root / f"{label}_s{seed}", seed=seed, accuracies=accuracies, rounds=ROUNDS,
                               total_rounds=3, label=label, summary={"rounds": 3, "seconds_per_round": 0.1})
            records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
            for record, clock in zip(records, seconds):
                record["virtual_seconds"] = float(clock)
            (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return root


def test_virtual_seconds_to_the_target_and_at_the_end(tmp_path, fake_run):
    report = build_report(collect_runs([clocked_runs(tmp_path / "runs", fake_run)]), targets=(0.7,))
    section = report.sections[0]
    rows = {row.name: row for row in section.rows}
    assert section.clocked
    # sync reaches 70% at 80 s, 50 s and 125 s; fedbuff at 10 s and 22 s, seed 3 never.
    assert rows["sync"].time_targets[0].values == (80.0, 50.0, 125.0)
    assert rows["sync"].time_targets[0].mean == pytest.approx(85.0)
    assert rows["fedbuff"].time_targets[0].values == (10.0, 22.0, None)
    assert rows["fedbuff"].time_targets[0].reached == 2
    assert rows["fedbuff"].virtual_seconds.mean == pytest.approx(31.0)
    cells = {row[0][0]: [text for text, _ in row] for row in section_cells(section)}
    assert cells["fedbuff"][7:9] == ["16 ± 8 (2/3)", "31 ± 1"]


def test_the_baseline_compares_the_seconds_to_the_target_fewer_is_better(tmp_path, fake_run):
    report = build_report(collect_runs([clocked_runs(tmp_path / "runs", fake_run)]), targets=(0.7,),
                          baseline="sync")
    table = report.sections[0].baseline
    timed = [c for c in table.comparisons if c.metric == "virtual_seconds_to_target"]
    assert len(timed) == 1
    # Seeds 1 and 2 paired (seed 3 of fedbuff never reached 70%): 10 - 80 = -70, 22 - 50 = -28.
    differences = [-70.0, -28.0]
    mean = sum(differences) / 2
    half = 12.706204736174707 * math.sqrt(sum((d - mean) ** 2 for d in differences)) / math.sqrt(2)
    assert timed[0].difference.seeds == (1, 2)
    assert timed[0].difference.mean == pytest.approx(mean)
    assert timed[0].difference.high == pytest.approx(mean + half)
    assert timed[0].outcome == "inconclusive" and mean + half > 0      # two seeds: a wide interval
    row = next(cells for cells in baseline_cells(table) if cells[1] == "virtual s to target")
    assert row[3] == "-49 s"


def test_fewer_seconds_on_every_seed_holds_and_more_is_contradicted(tmp_path, fake_run):
    from fedhet.lab.report.baseline import outcome
    from fedhet.lab.report.difference import paired_difference

    faster = paired_difference({1: 10.0, 2: 11.0, 3: 12.5}, {1: 50.0, 2: 52.0, 3: 49.0})
    assert outcome(faster, lower_is_better=True) == "holds"
    assert outcome(faster) == "contradicted"          # the accuracy reading of the same interval
    slower = paired_difference({1: 50.0, 2: 52.0, 3: 49.0}, {1: 10.0, 2: 11.0, 3: 12.5})
    assert outcome(slower, lower_is_better=True) == "contradicted"


def test_runs_without_a_clock_have_no_time_columns(tmp_path, fake_run):
    root = tmp_path / "runs"
    for seed in (1, 2):
        fake_run(root / f"a{seed}", seed=seed, accuracies=[0.5, 0.8], rounds=[1, 2], total_rounds=2, label="a",
                 summary=None)
    report = build_report(collect_runs([root]), targets=(0.7,), baseline="a")
    assert not report.sections[0].clocked and report.sections[0].rows[0].time_targets == []
    files = write_report(report, tmp_path / "report")
    assert "virtual s" not in files.markdown.read_text()


def test_the_files_show_the_time_columns(tmp_path, fake_run):
    report = build_report(collect_runs([clocked_runs(tmp_path / "runs", fake_run)]), targets=(0.7,),
                          baseline="sync")
    files = write_report(report, tmp_path / "report")
    text = files.markdown.read_text()
    assert "virtual s to 70%" in text and "virtual s (end)" in text and "fewer is better" in text
    assert "virtual s to 70%" in files.html.read_text()
    saved = json.loads(files.json.read_text())["sections"][0]["rows"]
    assert saved[0]["virtual_seconds_to_target"][0]["values"] in ([80.0, 50.0, 125.0], [10.0, 22.0, None])
    assert "virtual_seconds_to_0.7" in files.csv.read_text()
