"""The ``[asynchronous]`` section and the staleness functions of asynchronous FL (docs/async.md).

With an ``[asynchronous]`` section (and the ``[system]`` clock it needs) the server no longer runs
synchronous rounds: ``concurrency`` clients train at once, each from the model version it downloaded,
and the server consumes their arrivals in virtual-time order (:mod:`fedhet.engine.async_loop`).

- ``mode = "fedbuff"`` (Nguyen et al., AISTATS 2022): the server buffers ``buffer_size`` = K arrivals
  and applies them as one server step of the run's server method, update k weighted by ``s(tau_k)``.
- ``mode = "fedasync"`` (Xie et al., 2019): every arrival is one server step,
  ``x <- (1 - alpha_t) x + alpha_t y`` with ``alpha_t = alpha s(tau)``.

``tau`` is the staleness of an update: the number of server versions between the one the client
downloaded and the one the update is applied to. The staleness functions (FedAsync, section 5.2;
FedBuff uses the polynomial one with ``a = 0.5``)::

    constant     s(tau) = 1
    polynomial   s(tau) = (1 + tau)^(-a)                              a >= 0
    hinge        s(tau) = 1                     if tau <= b
                          1 / (a (tau - b) + 1) otherwise             a, b >= 0
"""
from __future__ import annotations

import dataclasses
import math

from fedhet.core.options import ConfigError, option, refuse_inactive

MODES = ("fedbuff", "fedasync")
STALENESS = ("constant", "polynomial", "hinge")


@dataclasses.dataclass(frozen=True)
class AsyncOptions:
    """``[asynchronous]`` options (docs/async.md)."""

    mode: str = option("fedbuff", choices=MODES,
                       help="'fedbuff': buffer buffer_size arrivals and apply them as one step of the server "
                            "method (Nguyen et al. 2022); 'fedasync': mix every arrival into the model, "
                            "x <- (1 - alpha_t) x + alpha_t y (Xie et al. 2019)")
    concurrency: int = option(10, ge=1, symbol="C",
                              help="clients training at once (at most the number of clients)")
    buffer_size: int = option(10, ge=1, symbol="K",
                              help="mode 'fedbuff': arrivals per server step (at most concurrency)")
    staleness: str = option("polynomial", choices=STALENESS,
                            help="staleness weight s(tau), tau = server versions since the client's download: "
                                 "'constant' 1, 'polynomial' (1 + tau)^(-a), 'hinge' 1 for tau <= b else "
                                 "1 / (a (tau - b) + 1)")
    staleness_a: float = option(0.5, ge=0, symbol="a",
                                help="staleness 'polynomial': the exponent a; 'hinge': the slope a")
    staleness_b: float = option(4.0, ge=0, symbol="b", help="staleness 'hinge': the staleness b up to which s = 1")
    alpha: float = option(0.6, gt=0, le=1, symbol="alpha",
                          help="mode 'fedasync': the mixing weight alpha (alpha_t = alpha s(tau))")

    def validate(self, section: str) -> None:
        if self.mode == "fedbuff" and self.buffer_size > self.concurrency:
            raise ConfigError(f"{section}.buffer_size", self.buffer_size,
                              f"must be at most {section}.concurrency ({self.concurrency}): the buffer fills "
                              "from the clients in flight")
        refuse_inactive(self, section, ("buffer_size",), active=self.mode == "fedbuff",
                        condition=f"{section}.mode = 'fedbuff' (here {self.mode!r})")
        refuse_inactive(self, section, ("alpha",), active=self.mode == "fedasync",
                        condition=f"{section}.mode = 'fedasync' (here {self.mode!r})")
        refuse_inactive(self, section, ("staleness_a",), active=self.staleness != "constant",
                        condition=f"{section}.staleness = 'polynomial' or 'hinge' (here {self.staleness!r})")
        refuse_inactive(self, section, ("staleness_b",), active=self.staleness == "hinge",
                        condition=f"{section}.staleness = 'hinge' (here {self.staleness!r})")


def staleness_weight(options: AsyncOptions, tau: int) -> float:
    """``s(tau)`` of ``options.staleness`` (module docstring); 1.0 exactly at ``tau = 0`` for every rule."""
    if tau < 0:
        raise ValueError(f"staleness {tau} < 0")
    if options.staleness == "constant":
        return 1.0
    if options.staleness == "polynomial":
        return 1.0 if tau == 0 else math.pow(1.0 + tau, -options.staleness_a)
    if tau <= options.staleness_b:
        return 1.0
    return 1.0 / (options.staleness_a * (tau - options.staleness_b) + 1.0)
