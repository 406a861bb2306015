"""`fedhet report` for a paper: --baseline paired differences (against a hand computation), the forest
plot, report.csv (tidy), --latex (booktabs), small multiples with a fixed colour per method, and the
worst-10% client accuracy over rounds."""
from __future__ import annotations

import csv
import io
import json
import math

import pytest

from fedhet.lab.report.build import build_report, write_report
from fedhet.lab.report.plots import method_colours, seed_band
from fedhet.lab.report.runs import RunDirectoryError, collect_runs

ROUNDS = [5, 10]
# Final accuracy per seed. fedavgm - fedavg = 0.05, 0.07, 0.06; slow - fedavg = -0.10, -0.11, -0.12.
FINAL = {"fedavg": {1: 0.70, 2: 0.72, 3: 0.68}, "fedavgm": {1: 0.75, 2: 0.79, 3: 0.74},
         "slow": {1: 0.60, 2: 0.61, 3: 0.56}}
T_975_2 = 4.302652729911275       # Student-t 0.975 quantile, 2 degrees of freedom (statistical tables)


def _runs(root, fake_run, *, alphas=(0.5,), labels=("fedavg", "fedavgm", "slow"), client_worst=None):
    for alpha in alphas:
        for label in labels:
            for seed, final in FINAL[label].items():
                run_dir = fake_run(root / f"{label}_a{alpha}_s{seed}", seed=seed, accuracies=[0.5, final],
                                   rounds=ROUNDS, total_rounds=10, label=label,
                                   summary={"rounds": 10, "e_ludd": 2.0, "seconds_per_round": 0.1},
                                   overrides=(f"data.alpha={alpha}",))
                if client_worst is not None:
                    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
                    for record, worst in zip(lines, client_worst):
                        record.update(client_accuracy_mean=0.6, client_accuracy_std=0.1,
                                      client_accuracy_worst10=worst, client_accuracy_best10=0.9)
                    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return root


def _hand_interval(differences):
    n = len(differences)
    mean = sum(differences) / n
    std = math.sqrt(sum((d - mean) ** 2 for d in differences) / (n - 1))
    half = T_975_2 * std / math.sqrt(n)
    return mean, mean - half, mean + half


def test_baseline_differences_match_a_hand_computation(tmp_path, fake_run):
    report = build_report(collect_runs([_runs(tmp_path / "runs", fake_run)]), baseline="fedavg")
    table = report.sections[0].baseline
    assert table.baseline == "fedavg"
    found = {(c.row, c.metric): c for c in table.comparisons}
    assert set(found) == {(row, metric) for row in ("fedavgm", "slow") for metric in ("final_accuracy", "last_accuracy")}
    for row, expected_outcome in (("fedavgm", "holds"), ("slow", "contradicted")):
        comparison = found[(row, "final_accuracy")]
        mean, low, high = _hand_interval([FINAL[row][s] - FINAL["fedavg"][s] for s in (1, 2, 3)])
        assert comparison.difference.seeds == (1, 2, 3)
        assert comparison.difference.mean == pytest.approx(mean, abs=1e-12)
        assert comparison.difference.low == pytest.approx(low, abs=1e-9)
        assert comparison.difference.high == pytest.approx(high, abs=1e-9)
        assert comparison.outcome == expected_outcome


def test_one_paired_seed_is_inconclusive(tmp_path, fake_run):
    root = tmp_path / "runs"
    fake_run(root / "a1", seed=1, accuracies=[0.5, 0.7], rounds=ROUNDS, total_rounds=10, summary=None, label="fedavg")
    fake_run(root / "a2", seed=2, accuracies=[0.5, 0.7], rounds=ROUNDS, total_rounds=10, summary=None, label="fedavg")
    fake_run(root / "b1", seed=1, accuracies=[0.5, 0.9], rounds=ROUNDS, total_rounds=10, summary=None, label="other")
    comparison = build_report(collect_runs([root]), baseline="fedavg").sections[0].baseline.comparisons[0]
    assert comparison.difference.n == 1 and comparison.difference.low is None
    assert comparison.outcome == "inconclusive"


def test_baseline_files_show_the_table_and_the_forest_plot(tmp_path, fake_run):
    report = build_report(collect_runs([_runs(tmp_path / "runs", fake_run)]), baseline="fedavg")
    files = write_report(report, tmp_path / "report")
    plot = tmp_path / "report" / "plots" / "section1_baseline.png"
    assert plot in files.plots and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    mean = 100 * _hand_interval([0.05, 0.07, 0.06])[0]
    markdown = files.markdown.read_text()
    assert "### Against fedavg" in markdown and f"| fedavgm | final acc. | 3 | +{mean:.2f} |" in markdown
    html = files.html.read_text()
    assert "<h3>Against fedavg</h3>" in html and "contradicted" in html
    saved = json.loads(files.json.read_text())["sections"][0]["baseline"]
    assert saved["row"] == "fedavg" and {c["outcome"] for c in saved["comparisons"]} == {"holds", "contradicted"}


def test_unknown_baseline_is_a_clear_error(tmp_path, fake_run, capsys):
    root = _runs(tmp_path / "runs", fake_run)
    with pytest.raises(RunDirectoryError, match=r"--baseline fedprox: no row of these runs is named so; rows: "
                                                r"fedavg, fedavgm, slow"):
        build_report(collect_runs([root]), baseline="fedprox")
    from fedhet.cli import main

    assert main(["report", str(root), "--out", str(tmp_path / "r"), "--baseline", "fedprox"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fedhet report: --baseline fedprox:")


def test_a_table_without_the_baseline_gets_a_note(tmp_path, fake_run):
    root = _runs(tmp_path / "runs", fake_run, alphas=(0.5,))
    _runs(root, fake_run, alphas=(1.0,), labels=("fedavgm", "slow"))
    report = build_report(collect_runs([root]), baseline="fedavg")
    assert [s.baseline.baseline for s in report.sections] == ["fedavg", None]
    markdown = write_report(report, tmp_path / "report").markdown.read_text()
    assert "No row of this table is named fedavg: no comparison." in markdown


def test_report_csv_is_tidy(tmp_path, fake_run):
    root = _runs(tmp_path / "runs", fake_run, alphas=(0.5, 1.0), labels=("fedavg", "fedavgm"))
    files = write_report(build_report(collect_runs([root]), targets=(0.7,)), tmp_path / "report")
    rows = list(csv.DictReader(io.StringIO(files.csv.read_text())))
    header = files.csv.read_text().splitlines()[0].split(",")
    assert header[:2] == ["run", "label"] and header[-3:] == ["seed", "metric", "value"]
    assert "data.alpha" in header                              # the setting key that differs
    metrics = {"final_accuracy", "best_accuracy", "last_accuracy", "e_ludd", "seconds_per_round", "rounds_to_0.7"}
    assert len(rows) == 2 * 2 * 3 * len(metrics)               # alphas x labels x seeds x metrics
    by_key = {(r["run"], r["metric"]): r for r in rows}
    line = by_key[("fedavgm_a1.0_s2", "final_accuracy")]
    assert (line["label"], line["data.alpha"], line["seed"], float(line["value"])) == ("fedavgm", "1.0", "2", 0.79)
    assert by_key[("fedavg_a0.5_s3", "rounds_to_0.7")]["value"] == ""      # 0.68 never reaches 0.7
    assert float(by_key[("fedavg_a0.5_s1", "rounds_to_0.7")]["value"]) == 10
    assert files.latex is None and not (tmp_path / "report" / "report.tex").exists()


def test_latex_table_is_booktabs_with_the_best_in_bold(tmp_path, fake_run):
    root = _runs(tmp_path / "runs", fake_run, labels=("fedavg", "fedavgm"))
    files = write_report(build_report(collect_runs([root]), title="Table_1 & more"), tmp_path / "report", latex=True)
    tex = files.latex.read_text()
    assert "\\toprule" in tex and "\\midrule" in tex and "\\bottomrule" in tex and "booktabs" in tex
    finals = list(FINAL["fedavgm"].values())
    mean = 100 * sum(finals) / 3
    std = 100 * math.sqrt(sum((f - sum(finals) / 3) ** 2 for f in finals) / 2)
    assert f"fedavgm & 3 & \\textbf{{{mean:.2f} $\\pm$ {std:.2f}}}" in tex
    assert "fedavg & 3 & 70.00 $\\pm$ 2.00" in tex            # not the best: plain
    assert "Table\\_1 \\& more" in tex and "data.alpha" not in tex.split("\\begin{tabular}")[1]


def test_small_multiples_keep_one_colour_per_method(tmp_path, fake_run):
    root = _runs(tmp_path / "runs", fake_run, alphas=(0.5, 1.0), labels=("fedavg", "fedavgm"))
    report = build_report(collect_runs([root]))
    groups = [row.group for section in report.sections for row in section.rows]
    colours = method_colours(groups)
    assert list(colours) == ["fedavg", "fedavgm"] and colours["fedavg"] != colours["fedavgm"]
    files = write_report(report, tmp_path / "report")
    assert set(report.panels) == {"test_accuracy", "train_loss"}           # no e_lud or client records here
    assert all(path in files.plots for path in report.panels.values())
    assert "## Every table side by side" in files.markdown.read_text()
    # One section: no small multiples.
    one = build_report([run for run in collect_runs([root]) if "_a0.5_" in run.path.name])
    write_report(one, tmp_path / "one")
    assert len(one.sections) == 1 and one.panels == {} and not list((tmp_path / "one" / "plots").glob("panels_*"))


def test_worst_client_accuracy_over_rounds_when_clients_were_evaluated(tmp_path, fake_run):
    plain = build_report(collect_runs([_runs(tmp_path / "plain", fake_run, labels=("fedavg",))]))
    write_report(plain, tmp_path / "r1")
    assert "client_accuracy_worst10" not in plain.sections[0].plots
    with_clients = build_report(collect_runs([_runs(tmp_path / "clients", fake_run, labels=("fedavg",),
                                                    client_worst=[0.1, 0.3])]))
    write_report(with_clients, tmp_path / "r2")
    assert with_clients.sections[0].plots["client_accuracy_worst10"].is_file()
    band = seed_band(with_clients.sections[0].rows[0].group, "client_accuracy_worst10")
    assert list(band.rounds) == ROUNDS and list(band.mean) == pytest.approx([0.1, 0.3])


def test_seed_band_takes_another_x_axis(tmp_path, fake_run):
    root = _runs(tmp_path / "runs", fake_run, labels=("fedavg",))
    group = build_report(collect_runs([root])).sections[0].rows[0].group
    band = seed_band(group, "test_accuracy", x_key="wall_seconds")       # fake runs: 0.1 s per round
    assert list(band.rounds) == pytest.approx([0.5, 1.0])
    assert band.mean[-1] == pytest.approx(sum(FINAL["fedavg"].values()) / 3)


def test_cli_writes_the_paper_files(tmp_path, fake_run, capsys):
    from fedhet.cli import main

    root = _runs(tmp_path / "runs", fake_run)
    out = tmp_path / "report"
    assert main(["report", str(root), "--out", str(out), "--baseline", "fedavg", "--latex"]) == 0
    printed = capsys.readouterr().out
    assert f"tidy CSV:        {out / 'report.csv'}" in printed and f"LaTeX tables:    {out / 'report.tex'}" in printed
    assert (out / "report.tex").is_file() and (out / "plots" / "section1_baseline.png").is_file()
