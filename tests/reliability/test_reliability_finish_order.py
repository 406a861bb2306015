"""``summary.json``, which marks a run finished, is written after every other file of the run, so a
failure before it leaves a run that resumes and completes its files (campaign 2026-11-24 finding L2)."""
from __future__ import annotations

import errno

import pytest

import fedhet.engine.run_plots as run_plots
from fedhet.engine.runner import resume_run, run_experiment
from fedhet.lab.sweep.plan import read_summary


def test_summary_is_written_after_the_participation_files(small_config, tmp_path, monkeypatch):
    real = run_plots.write_participation

    def full_disk(handle):
        raise OSError(errno.ENOSPC, "No space left on device", str(handle.run_dir / "participation.pt"))

    monkeypatch.setattr(run_plots, "write_participation", full_disk)
    with pytest.raises(OSError):
        run_experiment(small_config("run.name=a"))
    run_dir = tmp_path / "a"
    assert read_summary(run_dir) is None               # not finished: sweeps, tune and claims resume it
    monkeypatch.setattr(run_plots, "write_participation", real)
    resume_run(run_dir)
    for name in ("participation.pt", "participation.png", "partition.png", "summary.json"):
        assert (run_dir / name).is_file(), name
    assert read_summary(run_dir)["rounds"] == 6
