"""Files planted in a run directory in place of fedhet's records (a FIFO, /dev/zero, nesting that
exhausts a recursive parser) neither hang nor exhaust a reader: they count as unreadable (campaign
2026-11-24 findings H5 and M5; docs/reliability.md)."""
from __future__ import annotations

import json
import os
import time

import pytest

from fedhet.config.schema import load_config
from fedhet.core.io import NotAPlainFileError, read_small_file
from fedhet.core.options import ConfigError
from fedhet.engine.callbacks import scan_metrics
from fedhet.engine.runner import run_experiment
from fedhet.engine.tracking import sweep_name
from fedhet.lab.report.runs import load_run
from fedhet.lab.sweep.plan import read_summary


def test_a_summary_fifo_does_not_hang(tmp_path):
    os.mkfifo(tmp_path / "summary.json")
    started = time.monotonic()
    assert read_summary(tmp_path) is None
    with pytest.raises(NotAPlainFileError, match="not a regular file"):
        read_small_file(tmp_path / "summary.json")
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("name", ["summary.json", "sweep_run.json"])
def test_a_summary_link_to_dev_zero_is_not_read(small_config, tmp_path, name):
    run_experiment(small_config("run.name=a", "run.rounds=2"))
    target = tmp_path / "a" / name
    target.unlink(missing_ok=True)
    os.symlink("/dev/zero", target)
    started = time.monotonic()
    run = load_run(tmp_path / "a")            # what fedhet report reads
    assert time.monotonic() - started < 5
    assert len(run.records) == 2
    if name == "summary.json":
        assert read_summary(tmp_path / "a") is None
    else:
        assert sweep_name(tmp_path / "a") is None               # not a regular file: no sweep
        assert run.sweep == {}


def test_a_huge_summary_is_refused_without_reading_it_all(tmp_path):
    with open(tmp_path / "summary.json", "wb") as handle:
        handle.truncate(64 * 1024 * 1024)       # sparse: 64 MiB of zeros, no disk used
    with pytest.raises(NotAPlainFileError, match="larger than"):
        read_small_file(tmp_path / "summary.json")
    assert read_summary(tmp_path) is None


def test_a_deeply_nested_metrics_line_is_a_bad_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"round": 1, "test_accuracy": 0.5}) + "\n" + "[" * 100000 + "]" * 100000 + "\n")
    scan = scan_metrics(path)
    assert [r["round"] for r in scan.records] == [1]
    assert [number for number, _ in scan.bad_lines] == [2]


def test_a_deeply_nested_toml_file_is_a_config_error(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("x = " + "[" * 100000 + "]" * 100000 + "\n")
    with pytest.raises(ConfigError, match="nested too deeply"):
        load_config(path)
