"""Options of per-client evaluation that are not a dataset's own: ``data.client_test_fraction``.

Every dataset takes ``data.client_test_fraction`` beside its own options, so the key is read from the
``[data]`` section before the dataset's options are validated and written back with them (see
:func:`fedhet.config.schema.resolve_config`). The rules across sections (``run.client_eval_data =
"holdout"`` needs a held-out slice) are checked by :func:`check_client_eval`. What the evaluation
computes is in ``docs/experiments.md`` ("Per-client evaluation").
"""
from __future__ import annotations

import dataclasses
from typing import Any

from fedhet.config.options import ConfigError, option


@dataclasses.dataclass(frozen=True)
class DataSplitOptions:
    """Keys of ``[data]`` that every dataset takes."""

    client_test_fraction: float = option(
        0.0, ge=0, lt=1,
        help="fraction of each client's partition held out (seeded by run.seed) for per-client evaluation and "
             "removed from its training data; at least one example per client when > 0; 0 (default): off")


SHARED_DATA_KEYS = frozenset(f.name for f in dataclasses.fields(DataSplitOptions))


def check_client_eval(run: Any, split: DataSplitOptions) -> None:
    """``run.client_eval_every > 0`` with ``run.client_eval_data = "holdout"`` needs a held-out slice."""
    if run.client_eval_every > 0 and run.client_eval_data == "holdout" and split.client_test_fraction == 0:
        raise ConfigError("run.client_eval_data", run.client_eval_data,
                          "'holdout' needs data.client_test_fraction > 0 (e.g. 0.2); set it, or evaluate on each "
                          "client's training data with run.client_eval_data = \"train\"")
