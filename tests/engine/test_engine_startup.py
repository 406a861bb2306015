"""Start-up (issue 17): nothing heavy that round 1 does not need is imported before it.

A fresh interpreter runs a one-round experiment through the command line's path (``fedhet.cli``,
``load_config``, ``run_experiment``) and records ``sys.modules`` when round 1 is about to start
(``on_run_start``). The plotting, tuning, tracking and distributed packages must not be there:
each costs from 0.2 s to seconds to import. After the run the heat maps exist, drawn at the end.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

# Packages round 1 never needs (matplotlib: the plots are drawn after the last round).
HEAVY = ("matplotlib", "scipy", "pandas", "ray", "flwr", "flwr_datasets", "datasets", "pyarrow", "optuna",
         "tensorboard", "mlflow", "wandb", "PIL", "transformers", "tokenizers")

_SCRIPT = """
import json, sys
import fedhet.cli  # the command line's first import
cli_modules = set(sys.modules)
from fedhet.config.schema import load_config
from fedhet.engine.callbacks import Callback
from fedhet.engine.runner import run_experiment

seen = {}

class Snapshot(Callback):
    def on_run_start(self, run):
        seen["modules"] = sorted({name.split(".")[0] for name in sys.modules})

config = load_config(None, ["data.name=synthetic", "data.num_devices=6", "data.max_device_size=40",
                            "partition.name=natural", "model.name=logreg", "participation.clients_per_round=2",
                            "run.rounds=1", "run.progress=false", "run.out_dir=" + sys.argv[1], "run.name=r"])
run_experiment(config, callbacks=[Snapshot()])
print(json.dumps({"cli": sorted({name.split(".")[0] for name in cli_modules}), "round1": seen["modules"]}))
"""


def test_nothing_heavy_is_imported_before_round_one(tmp_path):
    result = subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path)], capture_output=True, text=True,
                            timeout=300, env=dict(os.environ, PYTHONPATH=str(SRC)))
    assert result.returncode == 0, result.stderr[-2000:]
    modules = json.loads(result.stdout.strip().splitlines()[-1])
    assert not set(HEAVY) & set(modules["cli"])
    assert "torch" not in modules["cli"]          # `fedhet --help` and errors stay fast
    assert not set(HEAVY) & set(modules["round1"]), sorted(set(HEAVY) & set(modules["round1"]))
    assert "torch" in modules["round1"]           # the snapshot is taken where the run has started
    # The files of a run are all there at the end, the heat maps included.
    for name in ("partition.csv", "partition.png", "participation.png", "summary.json", "config.toml"):
        assert (tmp_path / "r" / name).stat().st_size > 0, name
