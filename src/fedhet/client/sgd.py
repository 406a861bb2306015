"""Plain local SGD, FedAvg's client (McMahan et al., 2017)."""
from __future__ import annotations

from fedhet.client.base import ClientOptions, LocalSolver
from fedhet.core.registry import CLIENT_SOLVERS


@CLIENT_SOLVERS.register("sgd", ClientOptions)
def make_sgd(options: ClientOptions) -> LocalSolver:
    """Local SGD: w <- w - eta_l (grad f_i(w) + wd w); upload w_K - x."""
    return LocalSolver(options)
