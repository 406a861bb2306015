"""metrics.jsonl is read tolerantly, never loses the records after a bad line, and every record is
written in full (issue 12, finding 2)."""
from __future__ import annotations

import json
import os

import pytest
import torch

from fedhet.engine import callbacks
from fedhet.engine.callbacks import MetricsWriter, read_metrics, scan_metrics
from fedhet.engine.runner import resume_run, run_experiment
from fedhet.lab.report.runs import collect_runs
from helpers_reliability import assert_same_run, final_params, values
from small_run import StopAfter


def test_a_bad_line_in_the_middle_loses_nothing_on_resume(small_config, tmp_path):
    run_experiment(small_config("run.name=full"))
    with pytest.raises(KeyboardInterrupt):
        run_experiment(small_config("run.name=cut"), callbacks=[StopAfter(5)])   # checkpoint after round 4
    path = tmp_path / "cut" / "metrics.jsonl"
    lines = path.read_text().splitlines()
    assert len(lines) == 5
    lines.insert(2, '{"round": 3, "test_accur')           # a torn record between rounds 2 and 3
    path.write_text("\n".join(lines) + "\n")
    scan = scan_metrics(path)
    assert [r["round"] for r in scan.records] == [1, 2, 3, 4, 5] and [n for n, _ in scan.bad_lines] == [3]

    messages = []
    resume_run(tmp_path / "cut", log=messages.append)
    assert any("line 3" in m and "metrics.bad.jsonl" in m for m in messages), messages
    assert_same_run(tmp_path / "full", tmp_path / "cut")
    aside = [json.loads(line) for line in (tmp_path / "cut" / "metrics.bad.jsonl").read_text().splitlines()]
    assert aside == [{"file": "metrics.jsonl", "line": 3, "text": '{"round": 3, "test_accur'}]


def test_report_warns_about_bad_lines_and_uses_the_records_after_them(small_config, tmp_path):
    run_experiment(small_config("run.name=a"))
    path = tmp_path / "a" / "metrics.jsonl"
    before = values(tmp_path / "a")
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:1] + ["not json", "[1, 2]"] + lines[1:]) + "\n")
    warnings = []
    [run] = collect_runs([tmp_path / "a"], warn=warnings.append)
    assert [r["round"] for r in run.records] == [1, 2, 3, 4, 5, 6]
    assert [{k: v for k, v in r.items() if k != "wall_seconds"} for r in run.records] == before
    assert len(warnings) == 1 and "2 unreadable line(s) (line 2, 3)" in warnings[0]


def test_short_writes_are_continued_until_the_record_is_whole(tmp_path, monkeypatch):
    real_write, calls = os.write, []

    def short_write(fd, data):            # a nearly full disk: at most 7 bytes per call
        calls.append(len(data))
        return real_write(fd, bytes(data[:7]))

    monkeypatch.setattr(callbacks.os, "write", short_write)
    writer = MetricsWriter(tmp_path / "metrics.jsonl")
    record = {"round": 1, "test_accuracy": 0.5, "test_loss": 1.25, "note": "x" * 40}
    writer.on_round_end(None, record)
    writer.on_round_end(None, {**record, "round": 2})
    assert len(calls) > 10
    assert read_metrics(tmp_path / "metrics.jsonl") == [record, {**record, "round": 2}]


def test_a_failed_write_is_an_error_not_a_silent_torn_line(tmp_path, monkeypatch):
    def full_disk(fd, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(callbacks.os, "write", full_disk)
    with pytest.raises(OSError, match="No space left"):
        MetricsWriter(tmp_path / "metrics.jsonl").on_round_end(None, {"round": 1, "test_accuracy": 0.5})


@pytest.mark.parametrize("failing", ["write", "fsync"])
def test_a_full_disk_while_appending_a_record_names_metrics_jsonl(tmp_path, monkeypatch, failing):
    """os.write and os.fsync raise ENOSPC naming no file; the one-line error must say which file."""
    from fedhet.error_lines import error_line

    def full_disk(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(callbacks.os, failing, full_disk)
    path = tmp_path / "metrics.jsonl"
    with pytest.raises(OSError) as caught:
        MetricsWriter(path).on_round_end(None, {"round": 1, "test_accuracy": 0.5})
    monkeypatch.undo()
    assert caught.value.filename == str(path)
    line, status = error_line(caught.value)
    assert line.startswith(f"fedhet: {path}: no space left on the device") and line.endswith("(ENOSPC)")
    assert status == 1


def test_a_record_damaged_before_the_checkpoint_is_named_as_lost(small_config, tmp_path):
    """Campaign 2026-11-24 finding L3: a line damaged before the last checkpoint cannot be recomputed;
    the resume says which round is missing (and the model is unaffected) instead of losing it silently."""
    run_experiment(small_config("run.name=full"))
    run_experiment(small_config("run.name=cut"))
    path = tmp_path / "cut" / "metrics.jsonl"
    lines = path.read_text().splitlines()
    lines[2] = lines[2][:20]                                  # round 3's record, torn in place
    path.write_text("\n".join(lines) + "\n")
    (tmp_path / "cut" / "summary.json").unlink()
    messages = []
    resume_run(tmp_path / "cut", log=messages.append)
    assert any("no record of round(s) 3 before the checkpoint" in m for m in messages), messages
    assert [r["round"] for r in values(tmp_path / "cut")] == [1, 2, 4, 5, 6]
    assert torch.equal(final_params(tmp_path / "full"), final_params(tmp_path / "cut"))
