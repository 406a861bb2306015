"""A round whose client updates already diverged is reported as divergence even when the server's
step fails on them first (campaign 2026-11-24 finding M4: FedAWARE's Gram matrix overflowed float32
and its min-norm solve raised a ValueError, shown as a bug in fedhet)."""
import pytest

from fedhet.config.schema import load_config
from fedhet.engine.runner import run_experiment
from fedhet.engine.simulator import TrainingDivergedError
from small_run import SMALL


def test_fedaware_float32_huge_learning_rate_is_divergence(tmp_path):
    config = load_config(None, [*SMALL, f"run.out_dir={tmp_path}", "run.name=m4", "server.name=fedaware",
                                "run.dtype=float32", "client.learning_rate=1e20"])
    with pytest.raises(TrainingDivergedError, match=r"round 1 diverged: client update norm (overflowed float32|.* exploded)"):
        run_experiment(config)
