"""The generic forest plot: a PNG written atomically, bars in the outcome's colour, nan rows without a bar."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fedhet.lab.report.forest import OUTCOME_COLOURS, ForestRow, forest_plot


def _pixels(path):
    from matplotlib.image import imread

    image = imread(str(path))
    return (np.round(image[..., :3] * 255)).astype(int).reshape(-1, 3)


def _count(pixels, hex_colour: str) -> int:
    """Pixels within a small distance of ``hex_colour`` (antialiased text leaves a few of any grey)."""
    rgb = np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)])
    return int((np.abs(pixels - rgb).sum(axis=1) <= 6).sum())


def test_forest_plot_draws_each_outcome_in_its_colour(tmp_path):
    rows = [
        ForestRow("A vs B", 2.0, 0.5, 3.5, 1.0, "holds"),
        ForestRow("A vs C", -2.0, -3.0, -1.0, 1.0, "contradicted"),
        ForestRow("A vs D", 0.1, -0.4, 0.6, 1.0, "not reproduced"),
    ]
    path = forest_plot(rows, tmp_path / "forest.png", title="claim 1", metric="accuracy points")
    assert path == tmp_path / "forest.png" and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = _pixels(path)
    for outcome in ("holds", "contradicted", "not reproduced"):
        assert _count(pixels, OUTCOME_COLOURS[outcome]) > 200, outcome
    # No row is inconclusive and the legend lists only outcomes present: at most antialiasing greys.
    assert _count(pixels, OUTCOME_COLOURS["inconclusive"]) < 100
    assert not list(tmp_path.glob(".*.tmp"))        # the atomic writer left no temporary file


def test_a_row_with_nan_gets_no_bar(tmp_path):
    rows = [ForestRow("one seed", math.nan, math.nan, math.nan, None, "holds"),
            ForestRow("grey", 1.0, 0.0, 2.0, None, "inconclusive")]
    pixels = _pixels(forest_plot(rows, tmp_path / "nan.png"))
    # The legend patch of "holds" is drawn, but no bar: its colour covers only the legend's patch.
    holds_pixels = _count(pixels, OUTCOME_COLOURS["holds"])
    assert _count(pixels, OUTCOME_COLOURS["inconclusive"]) > holds_pixels > 0


@pytest.mark.parametrize("rows", [[], [ForestRow("x", 1.0, 0.5, 1.5, None, "a caller's own word")]])
def test_empty_and_unknown_outcomes_still_write(tmp_path, rows):
    assert forest_plot(rows, tmp_path / "f.png").stat().st_size > 0
