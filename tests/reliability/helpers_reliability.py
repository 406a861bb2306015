"""Comparisons shared by the reliability tests: everything a run computes, without timings."""
from __future__ import annotations

from pathlib import Path

import torch

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
