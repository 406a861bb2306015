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
  the server method, which owns it and publishes it as the round's broadcast;
- ``server.aware = true`` is refused here, for every method alike, when the method's registration
  declares that its update is not a gradient step (``gradient_step``, :class:`~fedhet.core.registry.ServerRegistry`).

One paper, one module: each algorithm has a module here holding its options, client solver, server
half and registrations, read top to bottom (:mod:`fedhet.algorithms.scaffold`, ...); its docstring
states the update rule and holds its rows of the rule tables of docs/algorithms.md. Building blocks
that several papers share stay in :mod:`fedhet.client` and :mod:`fedhet.server`.
"""
from __future__ import annotations

from typing import Any, NamedTuple

from fedhet.client.base import LocalSolver
from fedhet.core.options import ConfigError
from fedhet.core.registry import ALGORITHMS, CLIENT_SOLVERS, SERVERS
from fedhet.server.base import ServerMethod
from fedhet.server.methods import refuse_aware_unless_gradient_step


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
    :class:`~fedhet.core.options.ConfigError` when the method needs another solver's options, and
    when ``server.aware = true`` asks to project a method that declares its update not a gradient step."""
    entry = SERVERS.get(server, key="server.name")
    client_options = None
    if entry.client is not None:
        # The registry takes client= and client_options_cls= together (Registry.register).
        assert entry.client_options_cls is not None, f"server {server!r} registered with client= but no client_options_cls"
        if not isinstance(solver.options, entry.client_options_cls):
            paired = [name for name, pair in ALGORITHMS.items() if pair.server == server and pair.client == entry.client]
            via = f", or algorithm = '{paired[0]}'" if paired else ""
            raise ConfigError("server.name", server,
                              f"the {server} server is built from the options of the {entry.client} client "
                              f"(client.name = '{entry.client}'{via}), which this run's client does not have "
                              f"({type(solver.options).__name__})")
        client_options = solver.options
    refuse_aware_unless_gradient_step(server_options, entry.not_a_gradient_step(server_options, client_options))
    method = entry.factory(server_options) if entry.client is None else entry.factory(server_options, client_options)
    stage = solver.server_stage()
    if stage is not None:
        method = method.with_stage(stage)
    return method
