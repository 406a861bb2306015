"""Selection criteria of ``fedhet tune``: read from a trial's metrics, never from the test set.

- ``train_loss@R``: the training loss recorded at round R (the mean local minibatch loss of the
  rounds since the previous evaluation; with ``run.eval_every = 1``, round R's own), as FedAU's
  paper chose its learning rates; minimised. ``train_loss`` alone is the last round's.
- ``val_loss[@R]``, ``val_accuracy[@R]``: the loss / accuracy on the validation split carved from
  the training data (``data.validation_fraction``, :mod:`fedhet.data.validation`) at round R
  (default: the last round); the loss is minimised, the accuracy maximised.

Test metrics are not criteria: the search may record them, but they are reported apart and
:func:`select_best` sees only criterion values.
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Mapping, Optional, Sequence

from fedhet.tuning.errors import TuneError

METRICS = {"train_loss": False, "val_loss": False, "val_accuracy": True}   # name -> maximise


@dataclasses.dataclass(frozen=True)
class Criterion:
    metric: str
    round: Optional[int] = None          # None: the run's last round

    @property
    def maximize(self) -> bool:
        return METRICS[self.metric]

    @property
    def direction(self) -> str:
        return "maximize" if self.maximize else "minimize"

    @property
    def text(self) -> str:
        return self.metric if self.round is None else f"{self.metric}@{self.round}"

    def at_round(self, rounds: int) -> int:
        return rounds if self.round is None else self.round

    def worst(self) -> float:
        """The value of a trial that failed or diverged: worse than any real value."""
        return -math.inf if self.maximize else math.inf

    def intermediate(self, records: Sequence[Mapping[str, Any]], rounds: int) -> list[tuple[int, float]]:
        """``(round, value)`` of the metric at every evaluated round up to the criterion's round."""
        last = self.at_round(rounds)
        return [(int(r["round"]), _finite_or(float(r[self.metric]), self.worst()))
                for r in records if self.metric in r and int(r["round"]) <= last]

    def value(self, records: Sequence[Mapping[str, Any]], rounds: int) -> Optional[float]:
        """The metric at the criterion's round; None when that round was not recorded (the run
        stopped before it); a non-finite loss counts as :meth:`worst`."""
        wanted = self.at_round(rounds)
        for record in records:
            if int(record["round"]) == wanted and self.metric in record:
                return _finite_or(float(record[self.metric]), self.worst())
        return None


def _finite_or(value: float, fallback: float) -> float:
    return value if math.isfinite(value) else fallback


def parse_criterion(text: str) -> Criterion:
    """``"train_loss@20"`` -> :class:`Criterion`; anything naming the test set is refused."""
    match = re.fullmatch(r"([a-z_]+)(?:@(\d+))?", text.strip())
    if not match or match.group(1) not in METRICS:
        hint = (" (the test set is never a selection criterion: it would make the test result a "
                "tuned quantity; use val_* with data.validation_fraction)" if "test" in text else "")
        raise TuneError(f"--criterion {text!r}: allowed: train_loss@ROUND, val_loss[@ROUND], "
                        f"val_accuracy[@ROUND]{hint}")
    round_number = int(match.group(2)) if match.group(2) else None
    if round_number is not None and round_number < 1:
        raise TuneError(f"--criterion {text!r}: the round must be at least 1")
    return Criterion(match.group(1), round_number)


def check_criterion(criterion: Criterion, *, rounds: int, eval_every: int, validation_fraction: float) -> None:
    """The criterion's round is one the runs evaluate, and a val_* criterion has a validation split."""
    at = criterion.at_round(rounds)
    if at > rounds:
        raise TuneError(f"--criterion {criterion.text}: the runs have run.rounds = {rounds}; "
                        f"allowed: a round from 1 to {rounds}")
    if at != rounds and at % eval_every != 0:
        raise TuneError(f"--criterion {criterion.text}: round {at} is not evaluated (run.eval_every = "
                        f"{eval_every}); allowed: a multiple of {eval_every}, or {rounds}")
    if criterion.metric.startswith("val_") and validation_fraction <= 0:
        raise TuneError(f"--criterion {criterion.text} needs a validation split: set "
                        "data.validation_fraction (e.g. --set data.validation_fraction=0.1)")


def select_best(scores: Sequence[tuple[int, Optional[float]]], criterion: Criterion) -> Optional[int]:
    """The trial number with the best criterion value (ties: the lowest number); None when no trial
    has a value. Takes only ``(number, criterion value)``: nothing else can sway the choice."""
    scored = [(number, value) for number, value in scores if value is not None and not math.isnan(value)]
    if not scored:
        return None
    sign = -1.0 if criterion.maximize else 1.0
    return min(scored, key=lambda item: (sign * item[1], item[0]))[0]
