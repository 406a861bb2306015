"""`fedhet report` on hand-written run directories: mean ± sample std against a hand computation,
rounds to target, windows, grouping into rows and sections, the files, and clear errors."""
from __future__ import annotations

import base64
import json
import math
import re

import pytest

from fedhet.lab.report.build import build_report, write_report
from fedhet.lab.report.runs import RunDirectoryError, collect_runs, load_run
from fedhet.lab.report.stats import describe

ROUNDS = [2, 4, 6, 8, 10]
# Three seeds of one setting (10 rounds, evaluated every 2).
SEEDS = {
    1: dict(acc=[0.50, 0.60, 0.65, 0.72, 0.70], e_ludd=2.0, spr=0.1),
    2: dict(acc=[0.55, 0.62, 0.75, 0.73, 0.74], e_ludd=2.5, spr=0.2),
    3: dict(acc=[0.40, 0.50, 0.60, 0.80, 0.78], e_ludd=3.0, spr=0.3),
}


def _summary(values):
    return {"rounds": 10, "e_ludd": values["e_ludd"], "seconds_per_round": values["spr"], "stopped_early": False}


@pytest.fixture
def three_seeds(tmp_path, fake_run):
    root = tmp_path / "runs"
    for seed, values in SEEDS.items():
        fake_run(root / f"fedavg_seed{seed}", seed=seed, accuracies=values["acc"], rounds=ROUNDS, total_rounds=10,
                 summary=_summary(values))
    return root


def test_describe_is_mean_and_sample_std():
    stat = describe([0.70, 0.74, 0.78])
    assert stat.mean == pytest.approx(0.74)
    assert stat.std == pytest.approx(0.04)          # sqrt((0.04^2 + 0 + 0.04^2) / (3 - 1))
    assert stat.n == 3
    single = describe([0.5])
    assert single.mean == 0.5 and single.std is None
    assert describe([0.5, math.nan, None]).n == 1


def test_three_seeds_match_hand_computation(three_seeds):
    report = build_report(collect_runs([three_seeds]), targets=(0.7, 0.76), last_rounds=4)
    [section] = report.sections
    [row] = section.rows
    metrics = row.metrics
    # final: 0.70, 0.74, 0.78 -> mean 0.74, sample std 0.04
    assert metrics["final_accuracy"].mean == pytest.approx(0.74)
    assert metrics["final_accuracy"].std == pytest.approx(0.04)
    # best: 0.72, 0.75, 0.80 -> mean 0.756667, std sqrt(0.00326667 / 2) = 0.0404145
    assert metrics["best_accuracy"].mean == pytest.approx(0.7566667, abs=1e-6)
    assert metrics["best_accuracy"].std == pytest.approx(0.0404145, abs=1e-6)
    # last 4 rounds = rounds 8 and 10: 0.71, 0.735, 0.79 -> mean 0.745, std sqrt(0.00335 / 2) = 0.0409268
    assert metrics["last_accuracy"].mean == pytest.approx(0.745)
    assert metrics["last_accuracy"].std == pytest.approx(0.0409268, abs=1e-6)
    # e-LUDD 2.0, 2.5, 3.0 and s/round 0.1, 0.2, 0.3 from the summaries
    assert (metrics["e_ludd"].mean, metrics["e_ludd"].std) == (pytest.approx(2.5), pytest.approx(0.5))
    assert (metrics["seconds_per_round"].mean, metrics["seconds_per_round"].std) == (pytest.approx(0.2),
                                                                                       pytest.approx(0.1))
    # rounds to 0.7: 8, 6, 8 -> mean 7.3333, std sqrt(2.6667 / 2) = 1.1547; to 0.76: only seed 3, round 8
    to70, to76 = row.targets
    assert to70.values == (8, 6, 8) and to70.reached == 3 and to70.n == 3
    assert to70.mean == pytest.approx(22 / 3) and to70.std == pytest.approx(1.1547005, abs=1e-6)
    assert to76.values == (None, None, 8) and to76.reached == 1 and to76.mean == 8 and to76.std is None


def test_default_window_is_last_ten_percent(three_seeds):
    report = build_report(collect_runs([three_seeds]))
    last = report.sections[0].rows[0].metrics["last_accuracy"]
    # 10% of 10 rounds = the last round only: the final accuracies.
    assert last.mean == pytest.approx(0.74) and last.std == pytest.approx(0.04)
    assert report.window == "last 10%"


def test_written_files_show_the_numbers(three_seeds, tmp_path):
    report = build_report(collect_runs([three_seeds]), targets=(0.7, 0.76), last_rounds=4)
    files = write_report(report, tmp_path / "report")
    markdown = files.markdown.read_text()
    assert "| fedavg | 3 | 74.00 ± 4.00 | 75.67 ± 4.04 | 74.50 ± 4.09 | 2.50 ± 0.50 | 7.3 ± 1.2 (3/3) | 8.0 (1/3) |" \
        in markdown
    assert "ddof = 1" in markdown and "last 4 rounds" in markdown
    data = json.loads(files.json.read_text())
    row = data["sections"][0]["rows"][0]
    assert row["seeds"] == [1, 2, 3]
    assert row["metrics"]["final_accuracy"]["mean"] == pytest.approx(0.74)
    assert row["metrics"]["final_accuracy"]["std"] == pytest.approx(0.04)
    assert row["metrics"]["final_accuracy"]["values"] == pytest.approx([0.70, 0.74, 0.78])
    assert row["rounds_to_target"][1] == {"target": 0.76, "mean": 8.0, "std": None, "reached": 1, "n": 3,
                                          "values": [None, None, 8]}
    assert data["std"] == "sample standard deviation over seeds (ddof = 1)"
    assert {p.name for p in files.plots} == {"section1_test_accuracy.png", "section1_train_loss.png"}


def test_rows_and_sections(tmp_path, fake_run):
    root = tmp_path / "runs"
    for alpha in (0.5, 1.0):                      # data.alpha differs: two sections (tables)
        for server, label in (("fedavg", None), ("fedavgm", None)):
            for seed in (1, 2):
                fake_run(root / f"{server}_a{alpha}_s{seed}", seed=seed, accuracies=[0.5, 0.6], rounds=[5, 10],
                         total_rounds=10, summary=None, label=label,
                         overrides=(f"data.alpha={alpha}", f"server.name={server}"))
    # Two learning rates of one label inside a section: the row names say which.
    for lr in (0.1, 0.2):
        fake_run(root / f"lr{lr}", seed=1, accuracies=[0.3, 0.4], rounds=[5, 10], total_rounds=10, summary=None,
                 label="tuned", overrides=("data.alpha=0.5", f"client.learning_rate={lr}"))
    report = build_report(collect_runs([root]))
    titles = [s.title for s in report.sections]
    assert titles == ["data.alpha=0.5", "data.alpha=1.0"]
    first = report.sections[0]
    names = [row.name for row in first.rows]
    assert names == ["fedavg", "fedavgm", "tuned (client.learning_rate=0.1)", "tuned (client.learning_rate=0.2)"]
    assert [row.group.seeds for row in first.rows] == [[1, 2], [1, 2], [1], [1]]
    assert all(row.unfinished == len(row.group.runs) for row in first.rows)     # no summary.json: unfinished
    assert report.common["data.name"] == "synthetic" and "data.alpha" not in report.common
    by_server = build_report(collect_runs([root]), group_by=["server.name"])
    assert [s.title for s in by_server.sections] == ["server.name=fedavg", "server.name=fedavgm"]
    assert [row.name for row in by_server.sections[0].rows][:2] == ["fedavg (data.alpha=0.5)",
                                                                   "fedavg (data.alpha=1.0)"]


def test_unfinished_run_uses_its_records(tmp_path, fake_run):
    run = fake_run(tmp_path / "r", seed=1, accuracies=[0.4, 0.6], rounds=[2, 4], total_rounds=10, summary=None,
                   e_luds=[2.0, 3.0])
    report = build_report([load_run(run)])
    row = report.sections[0].rows[0]
    assert row.unfinished == 1
    assert row.metrics["e_ludd"].mean == pytest.approx(2.5)              # mean of the evaluated rounds' e-LUD
    assert row.metrics["seconds_per_round"].mean == pytest.approx(0.1)   # wall_seconds 0.4 after 4 rounds
    assert row.metrics["last_accuracy"].mean == pytest.approx(0.6)      # window empty: the last record


def test_same_run_twice_counts_once_and_twin_seed_warns(three_seeds, tmp_path, fake_run):
    twin = fake_run(tmp_path / "elsewhere" / "copy", seed=1, accuracies=SEEDS[1]["acc"], rounds=ROUNDS,
                    total_rounds=10, summary=_summary(SEEDS[1]))
    runs = collect_runs([three_seeds, three_seeds / "fedavg_seed1", twin])
    assert len(runs) == 4
    report = build_report(runs)
    assert report.sections[0].rows[0].group.seeds == [1, 2, 3]
    assert any("same setting and seed" in w for w in report.warnings)


def test_clear_errors(tmp_path, fake_run):
    with pytest.raises(RunDirectoryError, match="no such directory"):
        collect_runs([tmp_path / "missing"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunDirectoryError, match="not a fedhet run directory"):
        collect_runs([tmp_path / "empty"])
    run = fake_run(tmp_path / "norecords", seed=1, accuracies=[], rounds=[], total_rounds=10, summary=None)
    with pytest.raises(RunDirectoryError, match="no evaluated rounds"):
        collect_runs([run])
    with pytest.raises(RunDirectoryError, match="none of its 1 run directories"):
        collect_runs([tmp_path / "norecords" / ".."])
    good = fake_run(tmp_path / "good", seed=1, accuracies=[0.5], rounds=[10], total_rounds=10, summary=None)
    with pytest.raises(RunDirectoryError, match="not a configuration key"):
        build_report([load_run(good)], group_by=["data.nonsense"])
    with pytest.raises(RunDirectoryError, match="--target"):
        build_report([load_run(good)], targets=(80,))


def test_run_without_records_inside_a_directory_is_left_out_with_a_warning(three_seeds, fake_run):
    fake_run(three_seeds / "starting", seed=9, accuracies=[], rounds=[], total_rounds=10, summary=None)
    warnings = []
    runs = collect_runs([three_seeds], warn=warnings.append)
    assert len(runs) == 3 and len(warnings) == 1 and "no evaluated rounds" in warnings[0]


def test_html_is_self_contained(three_seeds, tmp_path):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(2, 1))
    FigureCanvasAgg(figure)
    figure.add_subplot().plot([0, 1], [0, 1])
    figure.savefig(three_seeds / "fedavg_seed1" / "partition.png")
    figure.savefig(three_seeds / "fedavg_seed1" / "participation.png")
    report = build_report(collect_runs([three_seeds]), title="<b>escaped</b> & title")
    files = write_report(report, tmp_path / "report")
    html = files.html.read_text()
    assert "<script" not in html.lower()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html, flags=re.I)
    sources = re.findall(r"""src="([^"]*)\"""", html)
    assert len(sources) == 4                            # accuracy and loss curves, partition, participation
    assert all(s.startswith("data:image/png;base64,") for s in sources)
    assert all(base64.b64decode(s.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n" for s in sources)
    assert "<link" not in html.lower() and "@import" not in html and "url(" not in html
    assert "&lt;b&gt;escaped&lt;/b&gt; &amp; title" in html
    # The markdown links the run's images by relative path.
    assert "](../runs/fedavg_seed1/partition.png)" in files.markdown.read_text()


def test_rows_follow_the_sweep_plan_order(tmp_path, fake_run):
    root = tmp_path / "sweep"
    for name in ("zeta", "alpha"):
        fake_run(root / name, seed=1, accuracies=[0.5], rounds=[10], total_rounds=10, summary=None, label=name,
                 overrides=("client.learning_rate=0.1" if name == "zeta" else "client.learning_rate=0.2",))
    (root / "sweep.json").write_text(json.dumps({"runs": [{"name": "zeta"}, {"name": "alpha"}]}))
    report = build_report(collect_runs([root]))
    assert [row.group.label for row in report.sections[0].rows] == ["zeta", "alpha"]
