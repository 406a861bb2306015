"""How every named server method is made from its stages, with the options common to all of them."""
from __future__ import annotations

from typing import Optional

from fedhet.core.options import ConfigError
from fedhet.server.aware import AwareProjection
from fedhet.server.base import Aggregator, ComposedServer, ServerOptimizer, ServerOptions, StepTransform, compose


def step_transforms(options: ServerOptions) -> tuple[StepTransform, ...]:
    """The :class:`~fedhet.server.base.StepTransform` s that the options common to every server
    method ask for: the AWARE projection when ``options.aware`` (:mod:`fedhet.server.aware`).

    Whether a method may take it is its registration's ``gradient_step`` declaration
    (:class:`fedhet.core.registry.ServerRegistry`), applied by :func:`refuse_aware_unless_gradient_step`
    when the method is built (:func:`fedhet.algorithms.server_for`)."""
    if not options.aware:
        return ()
    return (AwareProjection.from_options(options),)


def refuse_aware_unless_gradient_step(options: ServerOptions, not_a_gradient_step: Optional[str]) -> None:
    """Refuse ``server.aware = true`` with a :class:`~fedhet.core.options.ConfigError` quoting
    ``not_a_gradient_step``, the reason a method declares for its update not being a gradient step
    ``x <- x - eta_g dtilde`` (the premise of FedAWARE's Proposition 3.1; e.g. FedDyn, whose server
    sets ``x <- mean_S w_i - h/alpha``). None (a gradient step) or ``aware = false``: nothing to refuse."""
    if options.aware and not_a_gradient_step is not None:
        raise ConfigError("server.aware", True,
                          "the AWARE extension projects a gradient step x <- x - eta_g d (FedAWARE, "
                          f"Proposition 3.1), but {not_a_gradient_step}; allowed: false")


def server_method(aggregator: Aggregator, optimizer: ServerOptimizer, options: ServerOptions) -> ComposedServer:
    """The named method ``aggregator`` + ``optimizer`` with the step transforms ``options`` asks for
    (:func:`step_transforms`): how every registered server method is built."""
    return compose(aggregator, optimizer, step_transforms(options))
