"""Shared fixtures of the sweep tests: a tiny Synthetic experiment file."""
from __future__ import annotations

from pathlib import Path

import pytest

from small_run import small_toml

# A small, fast federation (as tests/engine/conftest.py): FedProx Synthetic(1,1), logistic regression, 12 clients.
SMALL_TOML = small_toml(name="tiny", rounds=6, eval_every=2, checkpoint_every=2)


@pytest.fixture
def tiny_config(tmp_path) -> Path:
    """A tiny experiment file (6 rounds of FedAvg on Synthetic, evaluated every 2 rounds)."""
    path = tmp_path / "tiny.toml"
    path.write_text(SMALL_TOML)
    return path
