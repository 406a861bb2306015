"""Shared pieces of the Flower bridge's tests: a small config, an in-process federation, the simulation."""
from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import torch

from fedhet.config.schema import apply_overrides, parse_override, resolve_config
from fedhet.engine import checkpoint as ckpt
from fedhet.engine.assembly import participation_from_config, simulator_from_config
from fedhet.engine.runner import build_federation, run_experiment

ROOT = Path(__file__).resolve().parents[2]
LOOPBACK_CONFIG = ROOT / "configs" / "flower" / "loopback_fedaware.toml"

# Method -> config overrides; synthetic data, 6 clients, 4 rounds (the loopback config's setting).
METHODS = {
    "fedavg": ["server.name=fedavg"],
    "fedaware": [],
    "fedau": ["server.name=fedau", "participation.name=bernoulli", "participation.ratio=0.5"],
    "scaffold": ["algorithm=scaffold", "server.learning_rate=1.0"],
    "fedspeed": ["algorithm=fedspeed"],
}


def small_config(overrides: list[str], rounds: int = 4, dtype: str = "float64") -> Any:
    """The loopback config with ``overrides``; a new ``section.name`` drops that section's other keys
    (FedAWARE's alpha, the uniform process's clients_per_round), and an ``algorithm`` the names and
    the server's keys (the algorithm names its client and server)."""
    raw = tomllib.loads(LOOPBACK_CONFIG.read_text())
    for item in overrides:
        key = item.split("=", 1)[0]
        if key.endswith(".name"):
            raw[key.split(".")[0]] = {}
        elif key == "algorithm":
            raw["server"] = {}
            raw["client"].pop("name")
    items = [*overrides, f"run.rounds={rounds}", f"run.dtype={dtype}", "run.progress=false"]
    return resolve_config(apply_overrides(raw, dict(parse_override(item) for item in items)))


def two_nodes() -> list[dict[str, Any]]:
    return [{"partition-id": 0, "num-partitions": 2}, {"partition-id": 1, "num-partitions": 2}]


def fedhet_run_params(config: Any, run_dir: Path) -> torch.Tensor:
    """The final model of ``fedhet run`` (its last checkpoint)."""
    run_experiment(config, run_dir)
    return ckpt.load_checkpoint(run_dir)["simulator"]["params"]


class ArrivedOnly:
    """A participation process that samples as ``inner`` and keeps only the clients that trained in the
    deployment's round ``t`` (its participation log): the simulation of "a failed client did not
    participate" (docs/flower.md, "Failures")."""

    def __init__(self, inner: Any, log: torch.Tensor):
        self.inner, self.log = inner, log

    def init(self, context):
        return self.inner.init(context)

    def sample(self, state, round_index, context):
        ids, state = self.inner.sample(state, round_index, context)
        arrived = self.log[round_index]
        return ids[arrived[ids]], state

    def probabilities(self, state):
        return self.inner.probabilities(state)

    def explores(self):
        return self.inner.explores()


def simulate_with_arrivals(config: Any, log: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(model, participation log)`` of the sequential simulation of ``config`` in which only the clients of
    ``log`` (the deployment's) trained each round; assembled as ``fedhet run`` assembles it (fedhet.engine.assembly)."""
    federation = build_federation(config, torch.device("cpu"))
    arrived = ArrivedOnly(participation_from_config(config), log)
    simulator = simulator_from_config(config, federation, participation=arrived)
    params = simulator.run(config.run.rounds)
    return params, simulator.participation_log
