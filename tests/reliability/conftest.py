"""Fixtures of the reliability tests: the small Synthetic federation of tests/small_run.py."""
from __future__ import annotations

import pytest

from fedhet.config.schema import load_config
from small_run import SMALL


@pytest.fixture
def small_config(tmp_path):
    def make(*overrides: str):
        return load_config(None, [*SMALL, f"run.out_dir={tmp_path}", *overrides])
    return make
