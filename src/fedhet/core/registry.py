"""Registries from names to component factories and their option dataclasses.

A component is registered next to its definition, as local SGD is in ``fedhet/algorithms/fedavg.py``::

    @CLIENT_SOLVERS.register("sgd", ClientOptions)
    def make_sgd(options: ClientOptions) -> LocalSolver: ...

and made known to the configuration by importing its module in ``fedhet/components.py``
(the one registry line per component). A named pairing of a local solver with a server method,
selected by ``algorithm = "fedavg"``, is declared with
``register_algorithm("fedavg", client="sgd", server="fedavg")``.
"""
from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Callable

from fedhet.core.options import ConfigError


@dataclasses.dataclass(frozen=True)
class Entry:
    name: str
    factory: Callable[..., Any]
    options_cls: type
    summary: str
    # A server method that shares hyperparameters with its local solver (FedDyn's alpha) is built
    # from both option objects, factory(options, client_options); this names the solver it needs
    # (client.name) and the class of that solver's options. None for every other component.
    client: str | None = None
    client_options_cls: type | None = None
    # A dataset whose factory ignores its ``seed`` (files read as they are): one loaded copy can
    # serve runs of every seed (fedhet.engine.dataset_cache). True (the safe default) for the rest.
    seeded: bool = True


class Registry:
    """Names to ``(factory, options dataclass)`` for one kind of component."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Entry] = {}

    def register(self, name: str, options_cls: type, *, client: str | None = None,
                 client_options_cls: type | None = None,
                 replace: bool = False, seeded: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register ``factory(options)``; with ``client`` (a server method that shares its solver's
        hyperparameters), ``factory(options, client_options)`` needing ``client_options_cls``.
        ``seeded=False``: a dataset factory that ignores its ``seed`` argument (see :class:`Entry`).

        A name registered twice is refused, unless ``replace=True``: a notebook cell that defines
        and registers a component can then be run again (the new definition replaces the old)."""
        def decorator(factory: Callable[..., Any]) -> Callable[..., Any]:
            if name in self._entries and not replace:
                raise ValueError(f"{self.kind} {name!r} registered twice; pass replace=True to "
                                 "replace it (e.g. when a notebook cell runs again)")
            summary = (factory.__doc__ or "").strip().splitlines()[0] if factory.__doc__ else ""
            self._entries[name] = Entry(name, factory, options_cls, summary, client, client_options_cls, seeded)
            return factory
        return decorator

    def get(self, name: str, *, key: str | None = None) -> Entry:
        if name not in self._entries:
            close = difflib.get_close_matches(str(name), list(self._entries), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(key or f"{self.kind}.name", name,
                              f"unknown {self.kind}{hint}; allowed: " + ", ".join(sorted(self._entries)))
        return self._entries[name]

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries


DATASETS = Registry("data")
PARTITIONERS = Registry("partition")
MODELS = Registry("model")
PARTICIPATION = Registry("participation")
CLIENT_SOLVERS = Registry("client")
SERVERS = Registry("server")


@dataclasses.dataclass(frozen=True)
class AlgorithmPair:
    """A named algorithm = a local solver and a server method (``algorithm = "scaffold"``)."""

    client: str
    server: str


ALGORITHMS: dict[str, AlgorithmPair] = {}


def register_algorithm(name: str, *, client: str, server: str, replace: bool = False) -> None:
    """Make ``algorithm = name`` select ``client.name = client`` and ``server.name = server``
    (``replace=True``: a name registered before now means this pair, as :meth:`Registry.register`)."""
    if name in ALGORITHMS and not replace:
        raise ValueError(f"algorithm {name!r} registered twice; pass replace=True to replace it")
    ALGORITHMS[name] = AlgorithmPair(client, server)
