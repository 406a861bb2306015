"""Selection criteria of ``fedhet tune``: read from a trial's metrics, never from the test set.

- ``val_accuracy_last10``: the mean validation accuracy over the evaluated rounds of the last 10% of
  the rounds (the window of the claims' ``last_accuracy``, :func:`fedhet.engine.summary.last_fraction_mean`),
  on the validation split carved from the training data (``data.validation_fraction``,
  :mod:`fedhet.data.validation`); maximised. The global model on data no client trains on.
- ``global_train_loss@R``: the loss of the global model over the clients' whole training set at
  round R (``run.global_train_loss_every``); minimised. This is FedAU's criterion: its step sizes
  were chosen by "the training loss at 500 rounds" of the global model (FedAU, ICLR 2024, Appendix C.4).
- ``global_train_loss_last10``: that loss averaged over its recorded rounds in the last 10% of the rounds;
  minimised. A window rather than one round, so that a step size whose loss oscillates near divergence is
  not chosen on one lucky round (the claims' FedAU tuning, docs/claims.md).
- ``val_loss[@R]``, ``val_accuracy[@R]``: the loss / accuracy on the validation split at round R
  (default: the last round); the loss is minimised, the accuracy maximised.
- ``train_loss@R``: the mean *local minibatch* loss the clients recorded during local training in the
  rounds since the previous evaluation (round R's own with ``run.eval_every = 1``); minimised. It is
  not a property of the global model: it keeps falling as the local step size grows, whatever the
  global model does (client drift), so it is a poor criterion for step sizes; kept for the search's
  backward compatibility and for problems without a validation split.

Test metrics are not criteria: the search may record them, but they are reported apart and
:func:`select_best` sees only criterion values.
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Mapping, Optional, Sequence

from fedhet.lab.tuning.errors import TuneError

# name -> maximise
METRICS = {"train_loss": False, "val_loss": False, "val_accuracy": True, "global_train_loss": False,
           "val_accuracy_last10": True, "global_train_loss_last10": False}
# Windowed criteria: name -> (the per-round metric averaged, the fraction of the last rounds).
WINDOWS = {"val_accuracy_last10": ("val_accuracy", 0.1), "global_train_loss_last10": ("global_train_loss", 0.1)}


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

    @property
    def recorded(self) -> str:
        """The per-round record key the criterion reads (a windowed criterion's averaged metric)."""
        return WINDOWS[self.metric][0] if self.metric in WINDOWS else self.metric

    def intermediate(self, records: Sequence[Mapping[str, Any]], rounds: int) -> list[tuple[int, float]]:
        """``(round, value)`` of the metric at every evaluated round up to the criterion's round."""
        last = self.at_round(rounds)
        key = self.recorded
        return [(int(r["round"]), _finite_or(float(r[key]), self.worst()))
                for r in records if key in r and int(r["round"]) <= last]

    def value(self, records: Sequence[Mapping[str, Any]], rounds: int) -> Optional[float]:
        """The metric at the criterion's round (a windowed criterion: its mean over the window); None
        when that round was not recorded (the run stopped before it); a non-finite value counts as
        :meth:`worst`."""
        wanted = self.at_round(rounds)
        if not any(int(record["round"]) == wanted and self.recorded in record for record in records):
            return None
        if self.metric in WINDOWS:
            from fedhet.engine import last_fraction_mean

            key, fraction = WINDOWS[self.metric]
            return _finite_or(last_fraction_mean([dict(r) for r in records], rounds, key, fraction), self.worst())
        for record in records:
            if int(record["round"]) == wanted and self.metric in record:
                return _finite_or(float(record[self.metric]), self.worst())
        return None


def _finite_or(value: float, fallback: float) -> float:
    return value if math.isfinite(value) else fallback


ALLOWED = ("val_accuracy_last10, global_train_loss@ROUND, val_loss[@ROUND], val_accuracy[@ROUND], "
           "train_loss@ROUND")


def parse_criterion(text: str) -> Criterion:
    """``"train_loss@20"`` -> :class:`Criterion`; anything naming the test set is refused."""
    match = re.fullmatch(r"([a-z_0-9]+)(?:@(\d+))?", text.strip())
    if not match or match.group(1) not in METRICS:
        hint = (" (the test set is never a selection criterion: it would make the test result a "
                "tuned quantity; use val_* with data.validation_fraction)" if "test" in text else "")
        raise TuneError(f"--criterion {text!r}: allowed: {ALLOWED}{hint}")
    round_number = int(match.group(2)) if match.group(2) else None
    if match.group(1) in WINDOWS and round_number is not None:
        raise TuneError(f"--criterion {text!r}: {match.group(1)} is a window over the run's last rounds; "
                        f"write it without @ROUND")
    if round_number is not None and round_number < 1:
        raise TuneError(f"--criterion {text!r}: the round must be at least 1")
    return Criterion(match.group(1), round_number)


def check_criterion(criterion: Criterion, *, rounds: int, eval_every: int, validation_fraction: float,
                    global_train_loss_every: int = 0) -> None:
    """The criterion's round is one the runs evaluate, a val_* criterion has a validation split, and
    global_train_loss@R is recorded at R."""
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
    if criterion.metric == "global_train_loss" and (
            global_train_loss_every == 0 or (at != rounds and at % global_train_loss_every != 0)):
        raise TuneError(f"--criterion {criterion.text}: round {at} has no global training loss "
                        f"(run.global_train_loss_every = {global_train_loss_every}); set "
                        f"run.global_train_loss_every to a divisor of {at} (e.g. --set run.global_train_loss_every={at})")


def select_best(scores: Sequence[tuple[int, Optional[float]]], criterion: Criterion) -> Optional[int]:
    """The trial number with the best criterion value (ties: the lowest number); None when no trial
    has a value. Takes only ``(number, criterion value)``: nothing else can sway the choice."""
    scored = [(number, value) for number, value in scores if value is not None and not math.isnan(value)]
    if not scored:
        return None
    sign = -1.0 if criterion.maximize else 1.0
    return min(scored, key=lambda item: (sign * item[1], item[0]))[0]
