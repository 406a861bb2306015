"""The HTML report opens in headless Chromium without console errors and renders (non-blank screenshot).

Runs scripts/check_report_chromium.sh; skipped where Chromium is not installed (apt-get install chromium).
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fedhet.lab.report.build import build_report, write_report
from fedhet.lab.report.runs import collect_runs

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "check_report_chromium.sh"
CHROMIUM = Path("/usr/bin/chromium")

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="Chromium not installed (apt-get install chromium)")]


def _check(html: Path, shot: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), str(html), str(shot)], capture_output=True, text=True, timeout=180)


def test_report_renders_without_console_errors(tmp_path, fake_run):
    for seed, accuracies in ((1, [0.3, 0.5, 0.6]), (2, [0.35, 0.55, 0.62]), (3, [0.25, 0.5, 0.66])):
        for server in ("fedavg", "fedavgm"):
            fake_run(tmp_path / "runs" / f"{server}_{seed}", seed=seed, accuracies=accuracies, rounds=[2, 4, 6],
                     total_rounds=6, summary=None, overrides=(f"server.name={server}",), e_luds=[2.0, 2.2, 2.1])
    files = write_report(build_report(collect_runs([tmp_path / "runs"]), targets=(0.5,)), tmp_path / "report")
    result = _check(files.html, tmp_path / "shot.png")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok:" in result.stdout and (tmp_path / "shot.png").stat().st_size > 10_000


def test_the_check_fails_on_a_page_with_a_console_error(tmp_path):
    page = tmp_path / "bad.html"
    page.write_text("<html><body><h1>text</h1><script>console.error('broken')</script></body></html>")
    result = _check(page, tmp_path / "bad.png")
    assert result.returncode == 1 and "broken" in result.stderr
