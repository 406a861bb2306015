import json
import math
import signal
import subprocess
import sys
import textwrap

import pytest
import torch

from fedhet.engine import checkpoint as ckpt
from fedhet.engine.callbacks import read_metrics
from fedhet.engine.runner import resume_run, run_experiment
from fedhet.engine.simulator import TrainingDivergedError
from small_run import StopAfter


def _values(records):
    # Everything except timings must be bit-identical.
    return [{k: v for k, v in r.items() if k != "wall_seconds"} for r in records]


def _final_params(run_dir):
    return ckpt.load_checkpoint(run_dir)["simulator"]["params"]


def test_run_writes_every_output(small_config, tmp_path):
    config = small_config("run.name=a")
    summary = run_experiment(config)
    run_dir = tmp_path / "a"
    for name in ["config.toml", "metrics.jsonl", "summary.json", "checkpoint.pt", "partition.csv",
                 "partition.png", "participation.pt"]:
        assert (run_dir / name).is_file(), name
    records = read_metrics(run_dir / "metrics.jsonl")
    assert [r["round"] for r in records] == [1, 2, 3, 4, 5, 6]
    for key in ["round", "test_accuracy", "test_loss", "train_loss", "num_participants", "wall_seconds", "e_lud"]:
        assert key in records[0]
    assert all(r["num_participants"] == 4 for r in records)
    saved = json.loads((run_dir / "summary.json").read_text())
    assert saved["final_accuracy"] == records[-1]["test_accuracy"] == summary["final_accuracy"]
    assert saved["best_accuracy"] == max(r["test_accuracy"] for r in records)
    # last 10% of 6 rounds = the last round
    assert saved["last10_accuracy"] == records[-1]["test_accuracy"]
    assert math.isclose(saved["e_ludd"], sum(r["e_lud"] for r in records) / 6)
    assert summary["final_accuracy"] > 0.3  # learns something on Synthetic(1,1) (10 classes)
    # which kernels rounded the numbers: a run repeats bit for bit only on the same capability
    assert saved["cpu_capability"] in {"DEFAULT", "AVX2", "AVX512", "ZVECTOR", "VSX", "SVE256", "NEON", "SVE128"}


def test_same_config_and_seed_give_identical_metrics(small_config, tmp_path):
    run_experiment(small_config("run.name=a"))
    run_experiment(small_config("run.name=b"))
    run_experiment(small_config("run.name=c", "run.seed=2"))
    a, b, c = (read_metrics(tmp_path / n / "metrics.jsonl") for n in "abc")
    assert _values(a) == _values(b)
    assert _values(a) != _values(c)
    assert torch.equal(_final_params(tmp_path / "a"), _final_params(tmp_path / "b"))


@pytest.mark.parametrize("stop_round", [1, 2, 5])
def test_interrupted_then_resumed_equals_uninterrupted(small_config, tmp_path, stop_round):
    run_experiment(small_config("run.name=full"))
    with pytest.raises(KeyboardInterrupt):
        run_experiment(small_config("run.name=cut"), callbacks=[StopAfter(stop_round)])
    resume_run(tmp_path / "cut")
    full = read_metrics(tmp_path / "full" / "metrics.jsonl")
    cut = read_metrics(tmp_path / "cut" / "metrics.jsonl")
    assert _values(full) == _values(cut)
    assert torch.equal(_final_params(tmp_path / "full"), _final_params(tmp_path / "cut"))


@pytest.mark.slow
@pytest.mark.parametrize("kill_round", [3, 4])
def test_killed_process_resumes_exactly(small_config, tmp_path, kill_round):
    """A real SIGKILL after round k (checkpoint every 2 rounds), then `fedhet run --resume`."""
    run_experiment(small_config("run.name=full"))
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path[:0] = {sys.path!r}
        from fedhet.config.schema import load_config
        from fedhet.engine.callbacks import Callback
        from fedhet.engine.runner import run_experiment
        from small_run import SMALL
        class Kill(Callback):
            def on_round_end(self, run, record):
                if record["round"] == {kill_round}:
                    os.kill(os.getpid(), signal.SIGKILL)
        config = load_config(None, [*SMALL, "run.out_dir={tmp_path}", "run.name=killed"])
        run_experiment(config, callbacks=[Kill()])
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    resumed = subprocess.run([sys.executable, "-m", "fedhet.cli", "run", "--resume", str(tmp_path / "killed")],
                             capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    full = read_metrics(tmp_path / "full" / "metrics.jsonl")
    killed = read_metrics(tmp_path / "killed" / "metrics.jsonl")
    assert _values(full) == _values(killed)
    assert torch.equal(_final_params(tmp_path / "full"), _final_params(tmp_path / "killed"))


def test_existing_run_directory_is_not_overwritten_by_accident(small_config):
    config = small_config("run.name=a", "run.rounds=2")
    run_experiment(config)
    with pytest.raises(FileExistsError, match=r"overwrite=True") as caught:
        run_experiment(config)
    # A Python caller is told the Python arguments; the command line's message names its flags.
    assert "fedhet.resume_run(" in str(caught.value) and "--overwrite" not in str(caught.value)
    assert "--resume" in caught.value.command_line_message()
    run_experiment(config, overwrite=True)


def test_divergence_stops_with_a_clear_message_and_keeps_the_checkpoint(small_config, tmp_path):
    # float32 overflows: 1e38 * gradient steps reach Inf within the first round.
    config = small_config("run.name=nan", "client.learning_rate=1e38", "run.checkpoint_every=1")
    with pytest.raises(TrainingDivergedError, match="non-finite.*learning rate.*checkpoint .* is intact"):
        run_experiment(config)
    saved = ckpt.load_checkpoint(tmp_path / "nan")
    assert saved["simulator"]["next_round"] == 0
    assert torch.isfinite(saved["simulator"]["params"]).all()
    # how the run ended is on disk, for readers that count a diverged run (fedhet.lab.claims.evaluate)
    marker = json.loads((tmp_path / "nan" / "diverged.json").read_text())
    assert marker["round"] == 1 and "non-finite" in marker["reason"]


def test_target_accuracy_stops_early_and_reports_rounds(small_config):
    summary = run_experiment(small_config("run.name=t", "run.target_accuracy=0.2", "run.stop_at_target=true"))
    assert summary["stopped_early"] and summary["rounds_to_target"] == summary["rounds"] < 6


def test_heterogeneous_participation_writes_raster_and_probability_plot(small_config, tmp_path):
    from fedhet.config.schema import load_config
    from small_run import SMALL

    overrides = [o for o in SMALL if not o.startswith("participation.")]
    summary = run_experiment(load_config(None, [*overrides, f"run.out_dir={tmp_path}", "run.name=het",
                                                "participation.name=heterogeneous", "participation.mean=0.3",
                                                "run.rounds=4"]))
    run_dir = tmp_path / "het"
    assert (run_dir / "participation.png").is_file()
    assert (run_dir / "participation_probabilities.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    log = torch.load(run_dir / "participation.pt")
    records = read_metrics(run_dir / "metrics.jsonl")
    assert log.shape == (4, 12) and log.sum(1).tolist() == [r["num_participants"] for r in records]
    assert summary["rounds"] == 4


def test_float64_run_stores_client_state_in_float64(small_config, tmp_path):
    from fedhet.engine.runner import RunHandle, build_federation

    config = small_config("run.name=f64", "run.dtype=float64", "client.name=scaffold", "server.name=scaffold")
    handle = RunHandle(config, tmp_path / "f64", build_federation(config, torch.device("cpu")), log=lambda m: None)
    assert all(store.table.dtype == torch.float64 for store in handle.simulator.client_stores.values())
    assert handle.simulator.client_stores  # scaffold keeps c_i
