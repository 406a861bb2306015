"""The report's accuracy-over-virtual-time curve (fedhet.lab.report.time_curves)."""
from types import SimpleNamespace

import numpy as np

from fedhet.lab.report.grouping import Group
from fedhet.lab.report.time_curves import plot_accuracy_against_time, time_band


def run(records):
    return SimpleNamespace(records=records)


def test_time_band_averages_seconds_and_accuracy_over_seeds_at_common_rounds():
    group = Group("g", {}, [run([{"round": 1, "virtual_seconds": 10.0, "test_accuracy": 0.5},
                                 {"round": 2, "virtual_seconds": 30.0, "test_accuracy": 0.7}]),
                            run([{"round": 2, "virtual_seconds": 50.0, "test_accuracy": 0.9}])])
    seconds, mean, std, seeds = time_band(group)
    assert seeds == 2
    np.testing.assert_allclose(seconds, [40.0])
    np.testing.assert_allclose(mean, [0.8])
    np.testing.assert_allclose(std, [np.std([0.7, 0.9], ddof=1)])


def test_the_plot_is_written_only_for_clocked_runs(tmp_path):
    clocked = Group("clock", {}, [run([{"round": r, "virtual_seconds": 5.0 * r, "test_accuracy": 0.1 * r}
                                       for r in range(1, 4)])])
    plain = Group("plain", {}, [run([{"round": 1, "test_accuracy": 0.3}])])
    assert not plot_accuracy_against_time([plain], tmp_path / "none.png", title="t")
    assert not (tmp_path / "none.png").exists()
    assert plot_accuracy_against_time([plain, clocked], tmp_path / "time.png", title="t")
    assert (tmp_path / "time.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
