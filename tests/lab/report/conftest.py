"""Shared fixtures of the report tests: fake run directories of the tiny Synthetic setting."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from small_run import small_toml

# The sweep tests' tiny setting (tests/lab/sweep/conftest.py): FedProx Synthetic(1,1), logistic regression, 12 clients.
SMALL_TOML = small_toml(name="tiny", rounds=6, eval_every=2, checkpoint_every=2)


def write_fake_run(run_dir: Path, *, seed: int, accuracies: list[float], rounds: list[int], total_rounds: int,
                   summary: dict | None, overrides: tuple[str, ...] = (), label: str | None = None,
                   e_luds: list[float] | None = None) -> Path:
    """A run directory written by hand: config.toml (resolved from the tiny setting plus ``overrides``),
    metrics.jsonl with the given evaluated rounds, and summary.json when ``summary`` is given."""
    from fedhet.config.schema import config_to_toml, load_config

    run_dir.mkdir(parents=True)
    base_file = run_dir.parent / f".base_{run_dir.name}.toml"
    base_file.write_text(SMALL_TOML)
    config = load_config(base_file, [f"run.seed={seed}", f"run.rounds={total_rounds}", f"run.name={run_dir.name}",
                                     f"run.out_dir={run_dir.parent}", *overrides])
    base_file.unlink()
    (run_dir / "config.toml").write_text(config_to_toml(config))
    lines = []
    for index, (round_number, accuracy) in enumerate(zip(rounds, accuracies)):
        record = {"round": round_number, "test_accuracy": accuracy, "test_loss": 1.0 - accuracy,
                  "train_loss": 1.5 - accuracy, "wall_seconds": 0.1 * round_number, "num_participants": 4}
        if e_luds is not None:
            record["e_lud"] = e_luds[index]
        lines.append(json.dumps(record))
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    if summary is not None:
        (run_dir / "summary.json").write_text(json.dumps(summary))
    if label is not None:
        (run_dir / "sweep_run.json").write_text(json.dumps({"label": label, "seed": seed}))
    return run_dir


@pytest.fixture
def fake_run():
    """``fake_run(run_dir, seed=..., accuracies=[...], rounds=[...], total_rounds=..., summary={...} or None,
    overrides=(...), label=None, e_luds=None)`` writes a run directory by hand (see :func:`write_fake_run`)."""
    return write_fake_run
