"""Checks between the ``[asynchronous]`` section and the rest of the configuration (docs/async.md,
"Configuration")."""
from __future__ import annotations

from typing import Any, Optional

from fedhet.core.options import ConfigError
from fedhet.system.asynchronous import AsyncOptions
from fedhet.system.options import SystemOptions

# The participation processes the event loop reads availability from: every client always on, or a trace.
ASYNC_PARTICIPATION = ("full", "trace")


def check_asynchronous(asynchronous: Optional[AsyncOptions], system: Optional[SystemOptions],
                       participation: Any, server: Any) -> None:
    """The asynchronous mode runs on the virtual clock (a ``[system]`` section whose policy is the
    default ``sync``: deadlines and over-commitment are rules of synchronous rounds), draws its
    clients itself (participation ``full``: always available, or ``trace`` with every available client
    eligible), and FedAsync's mixing replaces the server step (server ``fedavg`` with a learning rate
    of 1 and no AWARE extension)."""
    if asynchronous is None:
        return
    if system is None:
        raise ConfigError("asynchronous", "{...}", "needs the virtual clock: add a [system] section (docs/async.md)")
    if system.policy != "sync":
        raise ConfigError("system.policy", system.policy,
                          "is a rule of synchronous rounds; with an [asynchronous] section use 'sync' (the default)")
    if participation.name not in ASYNC_PARTICIPATION:
        raise ConfigError("participation.name", participation.name,
                          "with [asynchronous] the event loop draws the clients itself: use 'full' (every client "
                          "always available) or 'trace' (available inside its on-intervals)")
    options = participation.options
    if getattr(options, "clients_per_round", 0) != 0:
        raise ConfigError("participation.clients_per_round", options.clients_per_round,
                          "with [asynchronous] asynchronous.concurrency sets how many clients train; use 0")
    if getattr(options, "explore", False) or getattr(options, "startup_round", 0):
        raise ConfigError("participation.explore", True, "a warm-up sweep is a rule of synchronous rounds; "
                                                         "not available with [asynchronous]")
    if server.name == "known_participation":
        raise ConfigError("server.name", server.name, "weights updates by 1/(N p_n) with synchronous participation "
                                                      "probabilities, which asynchronous arrivals do not have")
    if asynchronous.mode == "fedasync":
        server_options = server.options
        if (server.name != "fedavg" or getattr(server_options, "learning_rate", 1.0) != 1.0
                or getattr(server_options, "aware", False)):
            raise ConfigError("server.name", server.name,
                              "asynchronous.mode = 'fedasync' mixes each arrival into the model itself "
                              "(x <- (1 - alpha_t) x + alpha_t y): use server 'fedavg' with learning_rate 1 and no "
                              "aware extension, or mode = 'fedbuff' to apply a server method")
