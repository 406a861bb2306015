"""The report's per-client accuracy table and distribution plot, and plot titles that wrap."""
from __future__ import annotations

import json

import pytest

from fedhet.lab.report.build import build_report, write_report
from fedhet.lab.report.plots import wrapped_title
from fedhet.lab.report.runs import collect_runs

# Per seed: the last record's client statistics and the per-client accuracies behind the plot.
CLIENTS = {1: dict(mean=0.6, std=0.2, worst=0.2, best=0.9, accuracy=[0.2, 0.5, 0.9]),
           2: dict(mean=0.7, std=0.1, worst=0.4, best=1.0, accuracy=[0.4, 0.7, 1.0])}


def _add_client_evaluation(run_dir, values):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    last = json.loads(lines[-1])
    last.update({"client_accuracy_mean": values["mean"], "client_accuracy_std": values["std"],
                 "client_accuracy_worst10": values["worst"], "client_accuracy_best10": values["best"]})
    (run_dir / "metrics.jsonl").write_text("\n".join([*lines[:-1], json.dumps(last)]) + "\n")
    (run_dir / "client_accuracy.json").write_text(json.dumps(
        {"round": last["round"], "data": "holdout", "num_examples": [5, 5, 5], "accuracy": values["accuracy"]}))


def test_report_has_per_client_table_plot_and_json(tmp_path, fake_run):
    root = tmp_path / "runs"
    for seed, values in CLIENTS.items():
        run_dir = fake_run(root / f"fedavg_seed{seed}", seed=seed, accuracies=[0.5, 0.6], rounds=[2, 4],
                           total_rounds=4, summary={"rounds": 4, "e_ludd": 2.0, "seconds_per_round": 0.1})
        _add_client_evaluation(run_dir, values)
    files = write_report(build_report(collect_runs([root])), tmp_path / "report")
    html = files.html.read_text()
    assert "Per-client accuracy" in html
    # worst-10%: mean (0.2 + 0.4) / 2 = 30%, sample std sqrt(2) * 10 pp = 14.14 pp.
    assert "<td>30.00 ± 14.14</td>" in html and "<td>65.00 ± 7.07</td>" in html
    assert (tmp_path / "report" / "plots" / "section1_client_accuracy.png").is_file()
    assert "section1_client_accuracy.png" in (tmp_path / "report" / "report.md").read_text()
    rows = json.loads(files.json.read_text())["sections"][0]["client_accuracy"]
    assert rows[0]["metrics"]["client_accuracy_best10"]["mean"] == pytest.approx(0.95)
    assert rows[0]["rounds"] == [4, 4]


def test_report_without_client_evaluation_has_no_client_section(tmp_path, fake_run):
    root = tmp_path / "runs"
    fake_run(root / "fedavg_seed1", seed=1, accuracies=[0.5], rounds=[2], total_rounds=2, summary=None)
    files = write_report(build_report(collect_runs([root])), tmp_path / "report")
    assert "Per-client accuracy" not in files.html.read_text()
    assert json.loads(files.json.read_text())["sections"][0]["client_accuracy"] == []


def test_long_titles_wrap_and_keep_every_word():
    title = "test accuracy: " + ", ".join(f"partition.key_{i}=value_{i}" for i in range(12))
    lines = wrapped_title(title).split("\n")
    assert len(lines) > 1 and all(len(line) <= 70 for line in lines)
    assert " ".join(lines) == title
    assert wrapped_title("test accuracy") == "test accuracy"


def test_a_long_plot_title_stays_inside_the_figure(tmp_path, monkeypatch):
    from types import SimpleNamespace

    import fedhet.lab.report.plots as plots

    figures = []
    monkeypatch.setattr(plots, "atomic_savefig", lambda figure, path, **kw: figures.append(figure))
    run = SimpleNamespace(records=[{"round": 1, "test_accuracy": 0.5}, {"round": 2, "test_accuracy": 0.6}])
    group = SimpleNamespace(display="fedavg", label="fedavg", runs=[run])
    setting = ", ".join(f"partition.option_{i}=value_{i}" for i in range(10))
    assert plots.plot_curves([group], "test_accuracy", tmp_path / "a.png", title=f"test accuracy: {setting}")
    figure = figures[0]
    figure.canvas.draw()
    title = figure.axes[0].title.get_window_extent()
    assert 0 <= title.x0 and title.x1 <= figure.bbox.x1 and title.y1 <= figure.bbox.y1
