"""Shared by the reliability tests: comparing runs bit for bit (timings aside), and running fedhet's
command line as a real subprocess of the same source tree with one thread."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

import fedhet
from fedhet.engine.callbacks import read_metrics
from fedhet.engine.checkpoint import load_checkpoint


def values(run_dir: Path) -> list[dict]:
    """The records of ``metrics.jsonl`` without wall-clock times (which differ between runs)."""
    return [{k: v for k, v in r.items() if k != "wall_seconds"} for r in read_metrics(Path(run_dir) / "metrics.jsonl")]


def final_params(run_dir: Path) -> torch.Tensor:
    return load_checkpoint(Path(run_dir))["simulator"]["params"]


def assert_same_run(a: Path, b: Path) -> None:
    """Bitwise: the same records (timings aside) and the same final model."""
    assert values(a) == values(b)
    assert torch.equal(final_params(a), final_params(b))


SOURCE_ROOT = str(Path(fedhet.__file__).resolve().parent.parent)


def subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SOURCE_ROOT, env.get("PYTHONPATH", "")) if p)
    env.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    return env


def fedhet_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fedhet.cli", *args], capture_output=True, text=True,
                          env=subprocess_env(), timeout=timeout)
