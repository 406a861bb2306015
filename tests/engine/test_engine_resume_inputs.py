"""A resumed run takes its trace and profiles from its checkpoint: the files it started with may be
edited, cut to fewer clients or removed, and the run still ends bit for bit where an uninterrupted
one ends (docs/system.md, "Resume and determinism")."""
from __future__ import annotations

import pytest
import torch

from fedhet.cli import main
from fedhet.config.schema import load_config
from fedhet.core.resume_inputs import from_checkpoint, resuming, saved_state
from fedhet.engine.callbacks import read_metrics
from fedhet.engine.checkpoint import load_checkpoint
from fedhet.engine.runner import resume_run, run_experiment
from small_run import StopAfter

THREE = ["data.name=synthetic", "data.num_devices=3", "data.max_device_size=60", "partition.name=natural",
         "partition.num_clients=3", "model.name=logreg", "client.learning_rate=0.05", "client.batch_size=8",
         "client.epochs=2", "run.progress=false", "run.rounds=6", "run.checkpoint_every=2"]
PROFILES = ("client,device_flops,seconds_per_sample,uplink_bps,downlink_bps,latency\n"
            "0,,0.001,100000,1000000,0.01\n1,,0.004,20000,100000,0.1\n2,,0.02,50000,200000,0\n")
# Client 0 always on; client 1 on in [0, 1] only; client 2 from 0.5 s on; replayed every 50 s.
TRACE = "client,start,end,period\n0,0,50,50\n1,0,1,50\n2,0.5,50,50\n"


def _records(run_dir):
    return [{k: v for k, v in r.items() if k != "wall_seconds"} for r in read_metrics(run_dir / "metrics.jsonl")]


def _sets(tmp_path):
    trace, profiles = tmp_path / "trace.csv", tmp_path / "profiles.csv"
    trace.write_text(TRACE)
    profiles.write_text(PROFILES)
    return [*THREE, f"run.out_dir={tmp_path}", "participation.name=trace", f"participation.trace_file={trace}",
            "system.profiles=file", f"system.profile_file={profiles}", "system.policy=deadline",
            "system.deadline=0.4", "system.partial_work=true"], trace, profiles


@pytest.mark.parametrize("change", ["removed", "cut to one client", "edited"])
def test_a_resume_uses_the_checkpoints_trace_and_profiles_not_the_files(tmp_path, change):
    sets, trace, profiles = _sets(tmp_path)
    run_experiment(load_config(None, [*sets, "run.name=whole"]))
    with pytest.raises(KeyboardInterrupt):
        run_experiment(load_config(None, [*sets, "run.name=cut"]), callbacks=[StopAfter(3)])
    if change == "removed":
        trace.unlink()
        profiles.unlink()
    elif change == "cut to one client":
        trace.write_text("client,start,end\n0,0,inf\n")
        profiles.write_text(PROFILES.splitlines()[0] + "\n0,,1,1,1,5\n")
    else:
        trace.write_text("client,start,end\n0,0,inf\n1,0,inf\n2,0,inf\n")
        profiles.write_text(PROFILES.replace("0.004", "9").replace("0.1\n", "7\n"))
    resume_run(tmp_path / "cut")
    assert _records(tmp_path / "cut") == _records(tmp_path / "whole")
    cut, whole = (load_checkpoint(tmp_path / name)["simulator"] for name in ("cut", "whole"))
    assert torch.equal(cut["params"], whole["params"])
    for key in ("owner", "start", "end", "period"):
        assert torch.equal(cut["participation"][key], whole["participation"][key])


def test_fedhet_run_resume_works_without_the_trace_file(tmp_path, capsys):
    sets, trace, profiles = _sets(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(load_config(None, [*sets, "run.name=cut"]), callbacks=[StopAfter(3)])
    trace.unlink()
    profiles.unlink()
    assert main(["run", "--resume", str(tmp_path / "cut")]) == 0
    assert [r["round"] for r in read_metrics(tmp_path / "cut" / "metrics.jsonl")][-1] == 6


def test_a_new_run_still_reads_and_checks_its_files(tmp_path):
    sets, trace, _ = _sets(tmp_path)
    trace.unlink()
    with pytest.raises(Exception, match="no such file"):
        load_config(None, [*sets, "run.name=new"])


def test_the_resume_context_holds_only_inside_its_block():
    assert not from_checkpoint() and saved_state("clock", ("now",)) is None
    saved = {"participation": {"inner": {"a": 1, "b": 2}}, "clock": {"now": 3.0}}
    with resuming(saved):
        assert from_checkpoint()
        assert saved_state("participation", ("a", "b")) == {"a": 1, "b": 2}        # found inside a wrapper
        assert saved_state("clock", ("now",)) == {"now": 3.0}
        assert saved_state("clock", ("later",)) is None
    with resuming():
        assert from_checkpoint() and saved_state("clock", ("now",)) is None
    assert not from_checkpoint()
