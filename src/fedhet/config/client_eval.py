"""Rules of per-client evaluation that span sections.

``data.client_test_fraction`` is an option of every dataset (:class:`fedhet.data.validation.DataOptions`);
``run.client_eval_every`` and ``run.client_eval_data`` are run options. What the evaluation computes is
in ``docs/experiments.md`` ("Per-client evaluation").
"""
from __future__ import annotations

from typing import Any

from fedhet.core.options import ConfigError


def check_client_eval(run: Any, data_options: Any) -> None:
    """``run.client_eval_every > 0`` with ``run.client_eval_data = "holdout"`` needs a held-out slice."""
    fraction = getattr(data_options, "client_test_fraction", 0.0)
    if run.client_eval_every > 0 and run.client_eval_data == "holdout" and fraction == 0:
        raise ConfigError("run.client_eval_data", run.client_eval_data,
                          "'holdout' needs data.client_test_fraction > 0 (e.g. 0.2); set it, or evaluate on each "
                          "client's training data with run.client_eval_data = \"train\"")
