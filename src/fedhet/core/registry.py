"""Registries from names to component factories and their option dataclasses.

A component is registered next to its definition, as local SGD is in ``fedhet/algorithms/fedavg.py``::

    @CLIENT_SOLVERS.register("sgd", ClientOptions)
    def make_sgd(options: ClientOptions) -> LocalSolver: ...

and made known to the configuration by importing its module in ``fedhet/components.py``
(the one registry line per component). A named pairing of a local solver with a server method,
selected by ``algorithm = "fedavg"``, is declared with
``register_algorithm("fedavg", client="sgd", server="fedavg")``.

Every server method declares whether its update is a gradient step ``x <- x - eta_g d``
(``SERVERS.register(..., gradient_step=...)``, required): the premise of FedAWARE's Proposition 3.1
(Zeng et al., AISTATS 2025), so the AWARE extension (``server.aware = true``) is accepted or refused
from the declaration (:func:`fedhet.algorithms.server_for`; docs/algorithms.md section 3).
"""
from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Callable, Optional, Union

from fedhet.core.options import ConfigError
from fedhet.errors import FedhetError


class RegistrationError(FedhetError, ValueError):
    """A component registered wrongly (a name twice, a server method without its ``gradient_step``
    declaration): the registering code's to fix, so the command line prints it as one line (a user's
    ``--module`` registers components too)."""


@dataclasses.dataclass(frozen=True)
class NotAGradientStep:
    """A server method's declaration that its update is not a gradient step ``x <- x - eta_g d``,
    with the reason (quoted when ``server.aware = true`` is refused); e.g. FedDyn's server, which
    sets ``x <- mean_S w_i - h/alpha`` (FedAWARE, AISTATS 2025, Section 5, leaves FedDyn out of its
    AWARE experiments as a method "which does not follow the global gradient descent rule")."""

    reason: str

    def __post_init__(self) -> None:
        if not isinstance(self.reason, str) or not self.reason.strip():
            raise RegistrationError(f"NotAGradientStep needs the reason as a non-empty string, got {self.reason!r}")


# What ``SERVERS.register(..., gradient_step=...)`` takes: True (a gradient step for every option
# value), a NotAGradientStep (never), or a function of the method's options returning one of the
# two, called as the factory is: ``rule(options)``, or ``rule(options, client_options)`` for a
# method built from its solver's options (FedSpeed: its released-code variant is FedDyn's rule).
GradientStep = Union[bool, NotAGradientStep, Callable[..., Union[bool, NotAGradientStep]]]


def _check_declaration(name: str, declaration: Any) -> None:
    """Refuse a ``gradient_step`` declaration that is none of the three forms of :data:`GradientStep`."""
    if declaration is True or isinstance(declaration, NotAGradientStep) or callable(declaration):
        return
    raise RegistrationError(f"server {name!r}: gradient_step must be True (its update is x <- x - eta_g d, "
                            "FedAWARE Proposition 3.1), NotAGradientStep(reason), or a function of its options "
                            f"returning one of them; got {declaration!r}")


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
    # A server method's declaration whether its update is a gradient step (GradientStep); None for
    # every other component.
    gradient_step: Optional[GradientStep] = None

    def not_a_gradient_step(self, options: Any, client_options: Any = None) -> Optional[str]:
        """Why this server method's update is not a gradient step ``x <- x - eta_g d`` with these
        options (its declared :class:`NotAGradientStep` reason); None when it is one.
        ``client_options``: the solver's options, for a method built from them (``client``)."""
        if self.gradient_step is None:
            raise RegistrationError(f"{self.name!r} declares no gradient_step: only server methods do")
        declaration = self.gradient_step
        if callable(declaration):
            declaration = declaration(options) if self.client is None else declaration(options, client_options)
            if not (declaration is True or isinstance(declaration, NotAGradientStep)):
                raise RegistrationError(f"server {self.name!r}: its gradient_step rule returned {declaration!r}; "
                                        "it must return True or NotAGradientStep(reason)")
        return declaration.reason if isinstance(declaration, NotAGradientStep) else None


def _is_fedhets(factory: Callable[..., Any]) -> bool:
    return str(getattr(factory, "__module__", "") or "").split(".")[0] == "fedhet"


class Registry:
    """Names to ``(factory, options dataclass)`` for one kind of component."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Entry] = {}
        # Names first registered with replace=True: a user's module imported before fedhet's own
        # components (a fresh process) replaces a built-in that is not registered yet.
        self._replaced_early: set[str] = set()

    def register(self, name: str, options_cls: type, *, client: str | None = None,
                 client_options_cls: type | None = None,
                 replace: bool = False, seeded: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register ``factory(options)``; with ``client`` (a server method that shares its solver's
        hyperparameters), ``factory(options, client_options)`` needing ``client_options_cls``.
        ``seeded=False``: a dataset factory that ignores its ``seed`` argument (see :class:`Entry`).

        A name registered twice is refused, unless ``replace=True``: a notebook cell that defines
        and registers a component can then be run again (the new definition replaces the old)."""
        return self._decorator(name, options_cls, replace, client=client, client_options_cls=client_options_cls,
                               seeded=seeded)

    def _decorator(self, name: str, options_cls: type, replace: bool,
                   **fields: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def decorator(factory: Callable[..., Any]) -> Callable[..., Any]:
            if name in self._replaced_early and not replace and _is_fedhets(factory):
                return factory      # the built-in's own registration, after the user's replacement: it stands
            if replace and name not in self._entries:
                self._replaced_early.add(name)
            if name in self._entries and not replace:
                raise RegistrationError(f"{self.kind} {name!r} registered twice; pass replace=True to "
                                        "replace it (e.g. when a notebook cell runs again)")
            summary = (factory.__doc__ or "").strip().splitlines()[0] if factory.__doc__ else ""
            self._entries[name] = Entry(name, factory, options_cls, summary, **fields)
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


_UNDECLARED = object()


class ServerRegistry(Registry):
    """The server methods: each registration declares ``gradient_step`` (:data:`GradientStep`)."""

    def register(self, name: str, options_cls: type, *, gradient_step: Any = _UNDECLARED,
                 client: str | None = None, client_options_cls: type | None = None,
                 replace: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register ``factory(options)`` (or ``factory(options, client_options)`` with ``client``, as
        :meth:`Registry.register`) with its ``gradient_step`` declaration: True, ``NotAGradientStep(reason)``
        or a function of the options returning one of them. Required: a registration without it
        is refused, naming the method."""
        if gradient_step is _UNDECLARED:
            raise RegistrationError(f"server {name!r} registered without gradient_step: declare whether its update "
                                    "is a gradient step x <- x - eta_g d (FedAWARE Proposition 3.1, the premise of "
                                    "server.aware): gradient_step=True, gradient_step=NotAGradientStep(reason), or a "
                                    "function of its options returning one of them")
        _check_declaration(name, gradient_step)
        return self._decorator(name, options_cls, replace, client=client, client_options_cls=client_options_cls,
                               gradient_step=gradient_step)


SERVERS = ServerRegistry("server")


@dataclasses.dataclass(frozen=True)
class AlgorithmPair:
    """A named algorithm = a local solver and a server method (``algorithm = "scaffold"``)."""

    client: str
    server: str


ALGORITHMS: dict[str, AlgorithmPair] = {}
_ALGORITHMS_REPLACED_EARLY: set[str] = set()


def register_algorithm(name: str, *, client: str, server: str, replace: bool = False) -> None:
    """Make ``algorithm = name`` select ``client.name = client`` and ``server.name = server``
    (``replace=True``: a name registered before now means this pair, as :meth:`Registry.register`)."""
    if name in _ALGORITHMS_REPLACED_EARLY and not replace:
        return          # a built-in pair registered after the user's replacement of it (Registry.register)
    if replace and name not in ALGORITHMS:
        _ALGORITHMS_REPLACED_EARLY.add(name)
    if name in ALGORITHMS and not replace:
        raise RegistrationError(f"algorithm {name!r} registered twice; pass replace=True to replace it")
    ALGORITHMS[name] = AlgorithmPair(client, server)
