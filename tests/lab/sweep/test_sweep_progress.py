"""The sweep's progress view: the overall fraction, one line per status change in logs, a fixed-size
block redrawn in place on terminals."""
from __future__ import annotations

import io
import re

import pytest

from fedhet.lab.sweep.progress import DONE, FAILED, RUNNING, SKIPPED, SweepProgress, bar


def test_bar():
    assert bar(0.5, width=10) == "|#####-----|  50%"
    assert bar(1.5, width=4) == "|####| 100%"


def test_fraction_counts_settled_runs_whole_and_running_runs_by_round():
    view = SweepProgress([("a", 10), ("b", 10), ("c", 20), ("d", 10)], io.StringIO(), live=False)
    view.update("a", SKIPPED)
    view.update("b", RUNNING)
    view.update("b", round=4, accuracy=0.5)
    view.update("c", FAILED)
    assert view.fraction() == pytest.approx((10 + 4 + 20 + 0) / 50)
    assert view.counts() == {"done": 0, "skipped": 1, "failed": 1, "running": 1, "pending": 1}


def test_eta_extrapolates_this_session_s_pace():
    now = [100.0]
    view = SweepProgress([("old", 10), ("a", 10), ("b", 10), ("c", 20)], io.StringIO(), live=False,
                         clock=lambda: now[0])
    view.update("old", SKIPPED)                        # finished before this session: not part of the pace
    assert view.eta_seconds() is None and view.eta_text() == ""
    view.update("a", RUNNING)
    assert view.eta_seconds() is None                  # no round run yet
    now[0] = 130.0
    view.update("a", DONE)                             # 10 rounds in 30 s; 30 rounds left -> 90 s
    assert view.eta_seconds() == pytest.approx(90.0)
    view.update("b", RUNNING)
    view.update("b", round=5)
    now[0] = 145.0                                     # 15 rounds in 45 s; 25 left -> 75 s
    assert view.eta_seconds() == pytest.approx(75.0) and view.eta_text() == "ETA ~75 s"
    now[0] = 1045.0                                    # 15 rounds in 945 s; 25 left -> 1575 s
    assert view.eta_text() == "ETA ~26 min"
    view.update("b", DONE)
    view.update("c", FAILED)
    assert view.eta_text() == ""


def test_eta_prices_each_kind_of_round_at_its_own_pace():
    # Two costly runs (10 rounds of 10 s) then two cheap ones (100 rounds of 0.1 s), one at a time: the
    # rounds-only extrapolation would price the cheap rounds at the costly pace.
    now = [0.0]
    kinds = {"slow1": ("costly", "m"), "slow2": ("costly", "m"), "fast1": ("cheap", "m"), "fast2": ("cheap", "n")}
    view = SweepProgress([("slow1", 10), ("slow2", 10), ("fast1", 100), ("fast2", 100)], io.StringIO(),
                         live=False, clock=lambda: now[0], kinds=kinds)
    view.update("slow1", RUNNING)
    now[0] = 100.0
    view.update("slow1", DONE)                         # no cheap round seen yet: the session's 10 s a round
    assert view.eta_seconds() == pytest.approx(210 * 10.0)
    view.update("fast1", RUNNING)
    now[0] = 105.0
    view.update("fast1", round=50)                     # 0.1 s a cheap round; fast2 borrows its prefix ("cheap",)
    assert view.eta_seconds() == pytest.approx(10 * 10.0 + 50 * 0.1 + 100 * 0.1)
    view.update("slow2", RUNNING)                      # in parallel now: 2 run-seconds per wall second
    now[0] = 110.0
    view.update("slow2", round=1)
    view.update("fast1", round=100)
    # spent 100 + 10 + 5 = 115 run-seconds in 110 s of wall time; to spend: slow2 9 rounds at
    # (100 + 5) / 11 s, fast1 none, fast2 100 rounds at 10 / 100 s.
    to_spend = 9 * 105 / 11 + 100 * 0.1
    assert view.eta_seconds() == pytest.approx(110 * to_spend / 115)


def test_log_mode_prints_one_line_per_status_change():
    stream = io.StringIO()
    view = SweepProgress([("run_a", 6), ("run_b", 6)], stream, live=False)
    view.update("run_a", RUNNING)
    view.update("run_a", round=2, accuracy=0.25)       # progress within a run: no line
    view.update("run_a", DONE, accuracy=0.5)
    view.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("[0/2] running   run_a")
    assert lines[1].startswith("[1/2] done      run_a") and "round 6/6" in lines[1] and "acc 0.5000" in lines[1]
    assert re.search(r"  50%  ETA ~\d+ s$", lines[1])
    assert lines[2].startswith("sweep |") and "1 done, 1 pending" in lines[2]


def test_live_mode_redraws_a_block_of_constant_height():
    stream = io.StringIO()
    view = SweepProgress([("a", 4), ("b", 4), ("c", 4)], stream, live=True)
    view.update("a", RUNNING)
    first = stream.getvalue()
    assert first.count("\n") == 4 and not re.match(r"\x1b\[\d+F", first)    # 3 runs + summary, no cursor-up yet
    view.update("a", DONE, accuracy=0.9)
    redraw = stream.getvalue()[len(first):]
    assert redraw.startswith("\x1b[4F") and redraw.count("\n") == 4
    assert "acc 0.9000" in redraw
