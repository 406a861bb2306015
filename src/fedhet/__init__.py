"""fedhet: federated optimisation under heterogeneity.

Public API::

    from fedhet import load_config, run_experiment, resume_run
    config = load_config("configs/fmnist_fedavg.toml", ["run.rounds=50"])
    result = run_experiment(config)     # the summary mapping, with .history and .run_dir
    table = load_runs("runs")           # every evaluated round of every run (pandas if installed)

    from fedhet import min_norm_weights, fedau_weights   # aggregation-weight functions
"""
from typing import TYPE_CHECKING

from fedhet.config import ExperimentConfig, load_config, resolve_config
from fedhet.core.options import ConfigError

if TYPE_CHECKING:
    # The lazy functions of _LAZY_FUNCTIONS below, named for type checkers (and __all__); at run time
    # __getattr__ imports them on first use. The two lists name the same modules.
    from fedhet.algorithms.fedau import fedau_weights
    from fedhet.lab.report.analysis import load_runs
    from fedhet.server.min_norm import min_norm_weights

__version__ = "0.1.0"


def run_experiment(*args, **kwargs):
    """See :func:`fedhet.engine.runner.run_experiment`."""
    from fedhet.engine import run_experiment as _run

    return _run(*args, **kwargs)


def resume_run(*args, **kwargs):
    """See :func:`fedhet.engine.runner.resume_run`."""
    from fedhet.engine import resume_run as _resume

    return _resume(*args, **kwargs)


# Public functions imported on first use (PEP 562), like run_experiment above: ``import fedhet``
# stays light, and ``fedhet.min_norm_weights`` is the function itself (signature and docstring).
_LAZY_FUNCTIONS = {
    "min_norm_weights": "fedhet.server.min_norm",   # min w^T Q w over the simplex (FedAWARE's weights)
    "fedau_weights": "fedhet.algorithms.fedau",  # FedAU Algorithm 2 weights from participation
    "load_runs": "fedhet.lab.report.analysis",        # run directories as one per-round table
}


def __getattr__(name: str):
    if name in _LAZY_FUNCTIONS:
        import importlib

        return getattr(importlib.import_module(_LAZY_FUNCTIONS[name]), name)
    raise AttributeError(f"module 'fedhet' has no attribute {name!r}")


__all__ = ["ConfigError", "ExperimentConfig", "load_config", "resolve_config", "run_experiment", "resume_run",
           "min_norm_weights", "fedau_weights", "load_runs", "__version__"]
