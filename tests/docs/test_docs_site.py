"""The docs site builds with ``mkdocs build --strict``: a broken link or API reference fails it."""
import os
import shutil
import subprocess
import sys

import pytest

import fedhet.components  # noqa: F401  (registers every component)
from docs_modules import ROOT
from fedhet.core.registry import SERVERS


def fedhet_version():
    import fedhet
    return fedhet.__version__


def _mkdocs_build(config_dir, site_dir):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
                          cwd=config_dir, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_docs_site_builds_strict_with_the_generated_pages(tmp_path):
    result = _mkdocs_build(ROOT, tmp_path / "site")
    assert result.returncode == 0, result.stdout + result.stderr
    site = tmp_path / "site"
    for page in ["index", "quickstart", "configuration", "algorithms", "design", "experiments",
                 "examples/index", "examples/quickstart", "benchmarks", "api/index", "api/engine"]:
        assert (site / f"{page}.html").is_file(), page
    assert (site / "examples" / "quickstart.ipynb").is_file()
    assert not list(site.rglob("*.py")), "build scripts must not be published"
    configuration = (site / "configuration.html").read_text()
    assert len(SERVERS.names()) > 10
    assert all(f"server.name = \"{name}\"" in configuration for name in SERVERS.names())
    # The API reference is rendered from the docstrings, not written by hand.
    engine = (site / "api" / "engine.html").read_text()
    assert "Run (or resume) an experiment and return its summary." in engine
    assert ":class:<code" not in engine
    # The performance page opens with the headline table and figure; the log is benchmarks/README.md itself.
    performance = (site / "performance.html").read_text()
    assert "results/performance_headline.png" in performance and (site / "results" / "performance_headline.png").is_file()
    assert "Workload W" in (site / "benchmarks.html").read_text()
    # The notebook is a page with its outputs, not only a download; the version is in the footer.
    notebook = (site / "examples" / "quickstart.html").read_text()
    assert "run_experiment" in notebook and "quickstart_output_" in notebook
    assert f"fedhet {fedhet_version()}" in (site / "index.html").read_text()
    assert "null" not in configuration.split("<article", 1)[1].split("</article>", 1)[0]
    assert (site / "stylesheets" / "extra.css").is_file()


@pytest.mark.slow
def test_a_broken_link_fails_the_strict_build(tmp_path):
    project = tmp_path / "project"
    shutil.copytree(ROOT / "docs", project / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "mkdocs.yml", project / "mkdocs.yml")
    (project / "src").symlink_to(ROOT / "src")
    (project / "benchmarks").symlink_to(ROOT / "benchmarks")
    (project / "pyproject.toml").symlink_to(ROOT / "pyproject.toml")   # the version (docs/site_meta.py)
    with open(project / "docs" / "quickstart.md", "a") as page:
        page.write("\nSee [the missing page](no-such-page.md).\n")
    result = _mkdocs_build(project, tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-page.md" in result.stdout + result.stderr
