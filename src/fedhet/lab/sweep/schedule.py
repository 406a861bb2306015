"""The order in which a sweep's worker processes take their runs: the longest first.

With ``J`` workers taking runs from a queue, the sweep ends when the last run ends; a long run
taken last keeps one worker busy while the others idle (the sweep's tail). Taking the runs in
decreasing order of their cost (the LPT rule: Graham, "Bounds on multiprocessing timing anomalies",
1969, within 4/3 of the best schedule) leaves the short runs to fill the end.

A run's cost is estimated from its configuration alone, in examples processed (no data set is
read and nothing is drawn): the rounds still to run times the expected clients per round times the
examples a client processes in a round (``client.steps x B``, or ``client.epochs`` passes over an
equal share of ``REFERENCE_EXAMPLES``), doubled for a local solver that takes two gradients a step,
plus the evaluations (a forward pass over ``REFERENCE_EXAMPLES / 6`` test examples, a third of a
training example's cost each). The estimate only orders the runs; ties keep the plan's order.
"""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence, TypeVar

REFERENCE_EXAMPLES = 60_000           # the training set a client's share is taken from
TWO_GRADIENT_SOLVERS = frozenset({"fedspeed", "fedsam"})   # a gradient at w, then one at the ascent point
Item = TypeVar("Item")


def number_of_clients(config: Any) -> int:
    """The partition's ``num_clients``; a natural partition (one client per device of the data set, no
    ``num_clients``) counts the data set's ``num_devices``, else 1."""
    for options in (config.partition.options, config.data.options):
        for key in ("num_clients", "num_devices"):
            value = getattr(options, key, None)
            if isinstance(value, int) and value >= 1:
                return value
    return 1


def expected_clients_per_round(config: Any) -> float:
    """The participation process's expected number of clients in a round."""
    options = config.participation.options
    num_clients = number_of_clients(config)
    name = config.participation.name
    if name == "full":
        return float(num_clients)
    if name == "bernoulli":
        return options.ratio * num_clients
    if name == "heterogeneous":
        return options.mean * num_clients
    per_round = getattr(options, "clients_per_round", 0) or 0
    return float(per_round) if per_round > 0 else float(num_clients)


def estimated_cost(config: Any, rounds_done: int = 0) -> float:
    """The examples a run still processes (module docstring): training plus evaluation."""
    client = config.client.options
    steps, batch_size = getattr(client, "steps", 0), getattr(client, "batch_size", 1)
    if steps > 0:
        per_client = steps * batch_size
    else:
        per_client = getattr(client, "epochs", 1) * REFERENCE_EXAMPLES / number_of_clients(config)
    if config.client.name in TWO_GRADIENT_SOLVERS:
        per_client *= 2
    rounds = max(config.run.rounds - rounds_done, 0)
    evaluations = math.ceil(rounds / max(config.run.eval_every, 1))
    return rounds * expected_clients_per_round(config) * per_client + evaluations * REFERENCE_EXAMPLES / 18


def longest_first(items: Sequence[Item], costs: Sequence[float]) -> list[Item]:
    """``items`` in decreasing order of ``costs``; equal costs keep their order."""
    if len(items) != len(costs):
        raise ValueError(f"{len(items)} items but {len(costs)} costs")
    order = sorted(range(len(items)), key=lambda i: -costs[i])
    return [items[i] for i in order]


def rounds_done(record: Optional[dict[str, Any]]) -> int:
    """The rounds a resumed run has behind it, from its latest metrics record (0 without one)."""
    return int(record["round"]) if record is not None else 0
