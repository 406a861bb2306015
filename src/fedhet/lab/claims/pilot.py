"""The FedSpeed claim's pilot: the late target and the rounds deltas, fixed on the tuning seed before evaluation.

The rule (configs/claims/4_fedspeed_dir06.toml, written before any pilot run; docs/claims.md, "History"):

- each of the claim's methods runs once at its chosen values on the protocol's tuning seed (the chosen tuning
  trials; the untuned methods one run each), recording the validation accuracy every round;
- ``target = floor_0.1pt(0.99 * max over methods of the last-10% validation accuracy)``;
- for each rounds-to-target comparison, ``delta = max(1, ceil(0.1 * R_b))`` rounds, with ``R_b`` the first round
  at which the comparison's baseline reaches the target in validation accuracy in the pilot, or ``T + 1`` when it
  never does.

Only validation accuracy is read: the pilot never looks at the test set, and its seed is none of the evaluation
seeds.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Optional, Sequence

from fedhet.engine import last_fraction_mean

TARGET_FRACTION = 0.99       # of the best method's last-10% validation accuracy
DELTA_FRACTION = 0.1         # of the baseline's pilot rounds to the target
VALIDATION_KEY = "val_accuracy"


@dataclasses.dataclass(frozen=True)
class Pilot:
    target: float
    best_method: str
    last10: dict[str, float]                     # method -> last-10% validation accuracy
    rounds: dict[str, Optional[int]]             # method -> first round reaching the target (None: never)
    deltas: dict[str, int]                       # baseline method -> delta in rounds


def first_round_reaching(records: Sequence[Mapping[str, Any]], target: float, key: str = VALIDATION_KEY) -> Optional[int]:
    """The first recorded round whose ``key`` reaches ``target``; None when none does."""
    for record in records:
        value = record.get(key)
        if isinstance(value, (int, float)) and math.isfinite(value) and value >= target:
            return int(record["round"])
    return None


def pilot(records_by_method: Mapping[str, Sequence[Mapping[str, Any]]], rounds: int) -> Pilot:
    """Target and deltas of the module docstring from each method's pilot records (``rounds`` = T)."""
    last10 = {}
    for method, records in records_by_method.items():
        value = last_fraction_mean([dict(r) for r in records], rounds, VALIDATION_KEY)
        if not math.isfinite(value):
            raise ValueError(f"pilot run of {method}: no finite validation accuracy in its last 10% of rounds")
        last10[method] = float(value)
    best_method = max(last10, key=lambda m: last10[m])
    # floor to 0.1 point; the small epsilon keeps 0.859999... (binary rounding of 0.86) at 0.86
    target = math.floor(TARGET_FRACTION * last10[best_method] * 1000 + 1e-9) / 1000
    reached = {method: first_round_reaching(records, target) for method, records in records_by_method.items()}
    deltas = {method: max(1, math.ceil(DELTA_FRACTION * (r if r is not None else rounds + 1) - 1e-9))
              for method, r in reached.items()}
    return Pilot(target, best_method, last10, reached, deltas)
