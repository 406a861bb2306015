"""Algorithms: the one place that builds a local solver and a server method together.

An algorithm is a local solver (``[client]``) and a server method (``[server]``) that run as one
(docs/design.md, "Algorithms"). :func:`build` makes both halves from a run's configuration, and is
what every engine calls (the runner, and any other backend or bridge that runs an algorithm):

- a server method that shares hyperparameters with its solver (FedDyn's ``alpha``, FedSpeed's
  ``variant`` and ``1/lambda``) is registered with the solver it needs
  (``SERVERS.register(name, options, client=..., client_options_cls=...)``) and built from both
  option objects, so the shared values are one option, read by both halves;
- server-side state the solver's clients need (SCAFFOLD's ``c``, FedCM's ``Delta``, FedADMM's
  ``x^0``) is the solver's :meth:`~fedhet.client.base.LocalSolver.server_stage`, handed here to
  the server method, which owns it and publishes it as the round's broadcast.

Each named algorithm (``algorithm = "scaffold"``) has a module here registering its pair and any
server half that belongs to it (:mod:`fedhet.algorithms.scaffold`, ...).
"""
from __future__ import annotations

from typing import Any, NamedTuple

from fedhet.client.base import LocalSolver
from fedhet.core.options import ConfigError
from fedhet.core.registry import ALGORITHMS, CLIENT_SOLVERS, SERVERS
from fedhet.server.base import ServerMethod


class Algorithm(NamedTuple):
    """A local solver and the server method it runs with."""

    solver: LocalSolver
    server: ServerMethod


def build(config: Any) -> Algorithm:
    """``(solver, server)`` of an :class:`~fedhet.config.schema.ExperimentConfig` (its ``client`` and
    ``server`` sections, names and options; ``algorithm = ...`` has already chosen them)."""
    return build_parts(config.client.name, config.client.options, config.server.name, config.server.options)


def build_parts(client: str, client_options: Any, server: str, server_options: Any) -> Algorithm:
    """``(solver, server)`` from the names and option objects of both halves (what :func:`build`
    does with a configuration's sections)."""
    solver = CLIENT_SOLVERS.get(client, key="client.name").factory(client_options)
    return Algorithm(solver, server_for(solver, server, server_options))


def server_for(solver: LocalSolver, server: str, server_options: Any) -> ServerMethod:
    """The server method ``server`` built to run with ``solver``: from the solver's options when the
    method shares its hyperparameters (FedDyn's ``alpha``), with the solver's
    :meth:`~fedhet.client.base.LocalSolver.server_stage` when it has one. Raises
    :class:`~fedhet.core.options.ConfigError` when the method needs another solver's options."""
    entry = SERVERS.get(server, key="server.name")
    if entry.client is None:
        method = entry.factory(server_options)
    else:
        if not isinstance(solver.options, entry.client_options_cls):
            paired = [name for name, pair in ALGORITHMS.items() if pair.server == server and pair.client == entry.client]
            via = f", or algorithm = '{paired[0]}'" if paired else ""
            raise ConfigError("server.name", server,
                              f"the {server} server is built from the options of the {entry.client} client "
                              f"(client.name = '{entry.client}'{via}), which this run's client does not have "
                              f"({type(solver.options).__name__})")
        method = entry.factory(server_options, solver.options)
    stage = solver.server_stage()
    if stage is not None:
        method = method.with_stage(stage)
    return method
