"""Issue 12, finding 14: report.md escapes HTML (and Markdown) from titles, run names and config
strings, as report.html does."""
from __future__ import annotations

import pytest

from fedhet.lab.report.build import build_report, write_report
from fedhet.lab.report.markdown import _escape
from fedhet.lab.report.runs import collect_runs

HOSTILE = "<img src=x onerror=alert(1)>"


def test_escape_makes_markup_literal():
    assert _escape("<b>a|b</b> & *c* [l](u)\nnext") == r"&lt;b&gt;a\|b&lt;/b&gt; &amp; \*c\* \[l\](u) next"


@pytest.mark.parametrize("where", ["title", "label", "config"])
def test_report_md_holds_no_raw_html(tmp_path, fake_run, where):
    from fedhet.config.schema import config_to_toml, load_config

    for seed in (1, 2):
        run_dir = fake_run(tmp_path / "runs" / f"r{seed}", seed=seed, accuracies=[0.5, 0.6], rounds=[5, 10],
                           total_rounds=10, summary={"rounds": 10}, label=HOSTILE if where == "label" else None)
        if where == "config":
            # A config string in the grouping key (fake runs never load data, so the root need not exist).
            config = load_config(None, ["data.name=fmnist", f"data.root={HOSTILE}{seed}", f"run.seed={seed}",
                                        "run.rounds=10", f"run.name=r{seed}"])
            (run_dir / "config.toml").write_text(config_to_toml(config))
    title = HOSTILE if where == "title" else "report"
    report = build_report(collect_runs([tmp_path / "runs"]), title=title,
                          group_by=["data.root"] if where == "config" else None)
    files = write_report(report, tmp_path / "out")
    markdown = files.markdown.read_text()
    assert "<img" not in markdown and "&lt;img src=x onerror=alert(1)&gt;" in markdown
    assert HOSTILE not in files.html.read_text()                  # report.html escapes it too
