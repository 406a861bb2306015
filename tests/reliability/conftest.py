"""Fixtures of the reliability tests: the small Synthetic federation of tests/small_run.py, and how
to run fedhet's command line as a real subprocess (the same source tree, one thread)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import fedhet
from fedhet.config.schema import load_config
from small_run import SMALL

SOURCE_ROOT = str(Path(fedhet.__file__).resolve().parent.parent)


def subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SOURCE_ROOT, env.get("PYTHONPATH", "")) if p)
    env.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    return env


def fedhet_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fedhet.cli", *args], capture_output=True, text=True,
                          env=subprocess_env(), timeout=timeout)


@pytest.fixture
def small_config(tmp_path):
    def make(*overrides: str):
        return load_config(None, [*SMALL, f"run.out_dir={tmp_path}", *overrides])
    return make
