"""An asynchronous run killed by a real SIGKILL between checkpoints, then resumed with `fedhet run --resume`,
equals the uninterrupted run bit for bit (docs/async.md, "Determinism and resume"): clients in flight,
trained uploads waiting for their arrival and the buffer all come back from the last checkpoint."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import pytest
import torch

from async_cases import MODES, federation_sets
from fedhet.config.schema import load_config
from fedhet.engine.callbacks import read_metrics
from fedhet.engine.checkpoint import load_checkpoint
from fedhet.engine.runner import run_experiment


def strip(records):
    return [{k: v for k, v in r.items() if k != "wall_seconds"} for r in records]


@pytest.mark.slow
@pytest.mark.parametrize("mode, kill_round", [("fedbuff", 5), ("fedasync", 7)])
def test_a_killed_async_run_resumes_to_the_uninterrupted_run(tmp_path, mode, kill_round):
    sets = [*federation_sets(tmp_path), *MODES[mode], f"run.out_dir={tmp_path}", "run.rounds=10",
            "run.checkpoint_every=3", "run.eval_every=1"]
    run_experiment(load_config(None, [*sets, "run.name=whole"]))
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path[:0] = {sys.path!r}
        from fedhet.config.schema import load_config
        from fedhet.engine.callbacks import Callback
        from fedhet.engine.runner import run_experiment
        class Kill(Callback):
            def on_round_end(self, run, record):
                if record["round"] == {kill_round}:
                    os.kill(os.getpid(), signal.SIGKILL)
        run_experiment(load_config(None, {[*sets, "run.name=killed"]!r}), callbacks=[Kill()])
    """)
    killed = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    saved = load_checkpoint(tmp_path / "killed")["simulator"]
    assert saved["next_round"] < kill_round and saved["asynchronous"]["queue"]     # clients were in flight
    resumed = subprocess.run([sys.executable, "-m", "fedhet.cli", "run", "--resume", str(tmp_path / "killed")],
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert strip(read_metrics(tmp_path / "killed" / "metrics.jsonl")) == strip(read_metrics(tmp_path / "whole" / "metrics.jsonl"))
    assert torch.equal(load_checkpoint(tmp_path / "killed")["simulator"]["params"],
                       load_checkpoint(tmp_path / "whole")["simulator"]["params"])
    summary = json.loads((tmp_path / "killed" / "summary.json").read_text())
    whole = json.loads((tmp_path / "whole" / "summary.json").read_text())
    assert summary["staleness_histogram"] == whole["staleness_histogram"]
    assert summary["clients_lost_total"] == whole["clients_lost_total"] > 0
