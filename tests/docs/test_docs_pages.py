"""The generated pages: the performance headline (from the benchmark results), the rendered notebook,
and the version and repository address taken from pyproject.toml."""
import json
import tomllib

import fedhet
from docs_modules import ROOT, load

benchmarks = load("docs/include_benchmarks.py")
notebook_page = load("docs/render_notebook.py")
site_meta = load("docs/site_meta.py")


def test_performance_page_opens_with_the_headline_table_and_figure():
    page = benchmarks.render()
    lines = page.splitlines()
    assert lines[0] == "# Performance"
    table = [line for line in lines if line.startswith("| W-")]
    assert len(table) == len(benchmarks.HEADLINE)
    # The table's cells are the result files' medians and ratios (read here independently of the page).
    for name, row in zip(benchmarks.HEADLINE, table):
        summary = {e["impl"]: e for e in json.loads((ROOT / "benchmarks" / "results" / name).read_text())["summary"]}
        for impl in ("floor", "fedhet-sequential", "fedhet-auto"):
            entry = summary[impl]
            assert f"{entry['wall_seconds']:.2f} s (**{entry['ratio_to_floor']:.2f}x**)" in row
    # The figure and the headline come before anything else; the dated log is one link away.
    assert page.index("![") < page.index("benchmarks.md") and "## " not in page
    assert benchmarks.figure_png()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_notebook_renders_with_its_stored_outputs():
    notebook = json.loads(notebook_page.NOTEBOOK.read_text())
    page, images = notebook_page.render(notebook, "examples/out_")
    code_cells = [c for c in notebook["cells"] if c["cell_type"] == "code" and "".join(c["source"]).strip()]
    assert page.count("```python") == len(code_cells)
    assert "fedhet.run_experiment" in page and "final accuracy" in page     # a printed output
    assert len(images) == 1 and all(data[:8] == b"\x89PNG\r\n\x1a\n" for data in images.values())
    assert f"]({list(images)[0].split('/')[-1]})" in page
    assert page.startswith("# ")


def test_version_and_repository_come_from_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    version, repository = site_meta.project_metadata()
    assert version == project["version"] == fedhet.__version__
    urls = project.get("urls", {})
    assert repository == (urls.get("Repository") or urls.get("Source"))
    config = site_meta.on_config({"extra": {}, "repo_url": None})
    assert config["copyright"] == f"fedhet {version}" and config["extra"]["version"] == version
