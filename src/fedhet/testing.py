"""Checks for a component written outside the package: ``check_solver(name)``, ``check_server(name)``.

The repository checks every registered component with the same tests (tests/server/test_server_zoo.py,
tests/backends); a solver or server method registered from user code gets none of them. These
functions run those checks on any registered name, on a small federation that trains in about a
second (Synthetic(1,1), 12 clients, logistic regression, float64), through the same entry points as
a run (:func:`fedhet.engine.assembly.simulator_from_config`, the checkpoint files):

- **kill and resume**: a run checkpointed after half its rounds, restored into a fresh simulator and
  finished, is bit for bit the uninterrupted run (model and every saved state);
- **backend parity**: the sequential and the vectorised backend give the same model to rounding
  (skipped, and said so, when the vectorised backend does not support the solver or model);
- **empty rounds**: a round without participants neither fails nor moves a model no client has
  trained yet, and later rounds stay finite.

A failed check raises :class:`ComponentCheckError` whose message names the check and the likely
cause (a kept gradient buffer, draws from torch's global generator, state outside the declared
stores). ``fedhet check solver NAME --module my_module`` is the command-line form
(docs/extending.md).
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import math
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import torch

from fedhet.errors import FedhetError

# The small federation of the checks; participation is set per check.
FEDERATION = (
    "data.name=synthetic", "data.num_devices=12", "data.max_device_size=120",
    "partition.name=natural", "partition.num_clients=12", "model.name=logreg",
    "client.learning_rate=0.05", "client.batch_size=16", "client.epochs=1",
    "run.dtype=float64", "run.progress=false",
)
UNIFORM = ("participation.name=uniform", "participation.clients_per_round=4")

_GRADIENT_CAUSE = ("does direction() (or begin/finish) keep the gradient grad_fn returned, across steps, while "
                   "the solver declares keeps_gradient = False? The sequential backend then hands it one reused "
                   "buffer: remove that declaration, or clone it (grad.clone()). Does it draw "
                   "random numbers from torch's global generator? Draw from begin()'s context "
                   "(context.randn, context.generators) instead. Does it keep state on the solver object? begin() "
                   "runs once per client in the sequential backend, once per cohort in the vectorized one")
_RESUME_CAUSE = ("is there state kept outside the declared stores (an attribute set on the solver or server "
                 "object, a draw from torch's global generator or Python's random module)? Keep per-client memories in "
                 "client_state_names, server state in the state init()/step() return, and draw random "
                 "numbers from the seeded streams (begin()'s context)")
_EMPTY_CAUSE = ("the server's step must accept a cohort of zero clients (len(cohort) == 0): leave x unchanged "
                "before any client has trained, and never divide by the number of participants")


class ComponentCheckError(FedhetError, AssertionError):
    """A registered component failed one of :mod:`fedhet.testing`'s checks; the message names the
    check, what differed and the likely cause."""


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """The checks a component passed (``passed``) and those that did not apply (``skipped``, with
    the reason)."""

    component: str
    passed: tuple[str, ...]
    skipped: tuple[str, ...]

    def lines(self) -> list[str]:
        return ([f"{self.component}: ok   {name}" for name in self.passed]
                + [f"{self.component}: skip {reason}" for reason in self.skipped])


class _ScriptedParticipation:
    """Replays a fixed ``[T, N]`` participation mask (round t = row t), rows possibly empty."""

    def __init__(self, mask: torch.Tensor):
        self.mask = mask.to(torch.bool)

    def init(self, context) -> dict[str, Any]:
        return {}

    def sample(self, state, round_index, context):
        return torch.nonzero(self.mask[round_index % len(self.mask)]).flatten(), state

    def probabilities(self, state) -> Optional[torch.Tensor]:
        # Known and uniform: methods that weight by participation probabilities (FedAU, FedAWARE's
        # known_participation) can run too.
        return torch.full((self.mask.shape[1],), float(self.mask.float().mean()), dtype=torch.float64)

    def explores(self) -> bool:
        return False


def _pair_for_solver(name: str) -> tuple[str, str]:
    from fedhet.core.registry import ALGORITHMS

    server = next((pair.server for pair in ALGORITHMS.values() if pair.client == name), "fedavg")
    return name, server


def _pair_for_server(name: str) -> tuple[str, str]:
    from fedhet.core.registry import ALGORITHMS

    client = next((pair.client for pair in ALGORITHMS.values() if pair.server == name), "sgd")
    return client, name


def _config(client: str, server: str, participation: Iterable[str], overrides: Iterable[str]):
    from fedhet.config import load_config

    return load_config(None, [*FEDERATION, *participation, f"client.name={client}", f"server.name={server}",
                              *overrides])


def _simulator(config, *, participation: Any = None, backend: Any = None):
    from fedhet.engine import build_federation, simulator_from_config

    return simulator_from_config(config, build_federation(config, torch.device("cpu")),
                                 participation=participation, backend=backend)


def _first_difference(left: Any, right: Any, path: str = "state") -> Optional[str]:
    """The path of the first value that differs bit for bit between two checkpoint trees, or None."""
    if isinstance(left, dict):
        if not isinstance(right, dict) or left.keys() != right.keys():
            return path
        return next((d for key in left if (d := _first_difference(left[key], right[key], f"{path}.{key}"))), None)
    if isinstance(left, (list, tuple)):
        if type(left) is not type(right) or len(left) != len(right):
            return path
        return next((d for i, (a, b) in enumerate(zip(left, right))
                     if (d := _first_difference(a, b, f"{path}[{i}]"))), None)
    if isinstance(left, torch.Tensor):
        same = (isinstance(right, torch.Tensor) and left.dtype == right.dtype and left.shape == right.shape
                and torch.equal(left, right))
        return None if same else path
    if isinstance(left, float) and math.isnan(left):
        return None if isinstance(right, float) and math.isnan(right) else path
    return None if left == right else path


def _check_parity(what: str, make: Callable[..., Any], rounds: int) -> Optional[str]:
    """Sequential against vectorised; returns the reason it was skipped, or None when it ran."""
    from fedhet.backends.vectorized import VectorizedBackend, unsupported_reason

    sequential = make()
    reason = unsupported_reason(sequential.task, sequential.solver)
    if reason is not None:
        return f"backend parity: the vectorised backend does not run this ({reason})"
    sequential.run(rounds)
    vectorized = make(backend=VectorizedBackend())
    vectorized.run(rounds)
    difference = (vectorized.params - sequential.params).abs().max().item()
    scale = sequential.params.abs().max().item()
    if not math.isfinite(difference) or difference > 1e-9 * max(1.0, scale):
        raise ComponentCheckError(
            f"{what}: backend parity failed: the model after {rounds} rounds differs between the sequential and "
            f"the vectorized backend (max |difference| {difference:.3g}, float64); {_GRADIENT_CAUSE}")
    return None


def _check_resume(what: str, make: Callable[..., Any], rounds: int) -> None:
    from fedhet.engine import checkpoint as ckpt

    split = rounds // 2
    straight = make()
    straight.run(rounds)
    first = make()
    first.run(split)
    with tempfile.TemporaryDirectory(prefix="fedhet-check-") as folder:
        ckpt.save_checkpoint(Path(folder), first.state_dict())
        resumed = make()
        resumed.load_state(ckpt.load_checkpoint(Path(folder)))
    resumed.run(rounds - split)
    difference = _first_difference(ckpt.to_saveable(straight.state_dict()), ckpt.to_saveable(resumed.state_dict()))
    if difference is not None:
        raise ComponentCheckError(
            f"{what}: kill and resume failed: a run checkpointed after round {split} and resumed differs from "
            f"the uninterrupted run of {rounds} rounds at {difference}; {_RESUME_CAUSE}")


def _check_empty_rounds(what: str, make: Callable[..., Any]) -> None:
    num_clients = 12
    mask = torch.zeros(5, num_clients, dtype=torch.bool)
    mask[1, [0, 2, 5]] = True
    mask[3, [1, 2, 3, 7]] = True
    simulator = make(participation=_ScriptedParticipation(mask))
    x0 = simulator.params.clone()
    try:
        simulator.run_round()
        if not torch.equal(simulator.params, x0):
            raise ComponentCheckError(f"{what}: empty rounds failed: a round without participants, before any "
                                      f"client trained, moved the model; {_EMPTY_CAUSE}")
        for _ in range(len(mask) - 1):
            simulator.run_round()
    except ComponentCheckError:
        raise
    except Exception as error:  # noqa: BLE001  (the component's own failure, reported with its check)
        raise ComponentCheckError(f"{what}: empty rounds failed in round {simulator.next_round + 1}: "
                                  f"{type(error).__name__}: {error}; {_EMPTY_CAUSE}") from error
    if not torch.isfinite(simulator.params).all():
        raise ComponentCheckError(f"{what}: empty rounds failed: the model is not finite after rounds without "
                                  f"participants; {_EMPTY_CAUSE}")


def _run_checks(what: str, client: str, server: str, rounds: int, overrides: Iterable[str]) -> CheckResult:
    from fedhet.config import load_components

    load_components()
    overrides = list(overrides)
    config = _config(client, server, UNIFORM, overrides)

    def make(participation: Any = None, backend: Any = None):
        return _simulator(config, participation=participation, backend=backend)

    passed, skipped = [], []
    # Resume first: state kept on the component object fails it with the more precise message (it
    # would fail parity too, since begin() runs once per client sequentially, once per cohort vectorized).
    _check_resume(what, make, rounds)
    passed.append(f"kill and resume (round {rounds // 2} of {rounds}, bit for bit)")
    reason = _check_parity(what, make, rounds)
    (skipped.append(reason) if reason else passed.append("backend parity (sequential = vectorized)"))
    _check_empty_rounds(what, make)
    passed.append("empty rounds")
    return CheckResult(what, tuple(passed), tuple(skipped))


def check_solver(name: str, *, rounds: int = 4, overrides: Iterable[str] = ()) -> CheckResult:
    """Run the registry-derived checks on local solver ``name`` (registered in
    :data:`fedhet.core.registry.CLIENT_SOLVERS`), with the server method an ``algorithm`` pairs it
    with, else FedAvg. ``overrides`` (``"client.mu=0.1"``, ...) set options of the small run.

    Returns the checks passed and skipped; raises :class:`ComponentCheckError` naming the failed
    check and its likely cause."""
    client, server = _pair_for_solver(name)
    return _run_checks(f"client {name!r} (with server {server!r})", client, server, rounds, overrides)


def check_server(name: str, *, rounds: int = 4, overrides: Iterable[str] = ()) -> CheckResult:
    """Run the registry-derived checks on server method ``name`` (registered in
    :data:`fedhet.core.registry.SERVERS`), with the local solver an ``algorithm`` pairs it with,
    else local SGD. Returns and raises as :func:`check_solver`."""
    client, server = _pair_for_server(name)
    return _run_checks(f"server {name!r} (with client {client!r})", client, server, rounds, overrides)


def import_user_modules(modules: Iterable[str]) -> None:
    """Import each module (a dotted name, or a ``.py`` file path) so that its registrations run:
    the command line's ``--module`` (components registered from user code).

    fedhet's own components are registered first, so that a module's ``register(name,
    replace=True)`` replaces a built-in rather than colliding with its later registration. A module
    that fails to import (an exception, a syntax error, or ``sys.exit`` at import) is reported as
    one line naming it: its own error, not fedhet's, and never a silent exit with nothing checked."""
    from fedhet.config import load_components

    load_components()
    for module in modules:
        path = Path(module)
        if module.endswith(".py"):
            if not path.is_file():
                raise FedhetError(f"--module {module}: no such file")
            spec = importlib.util.spec_from_file_location(path.stem, path)
            if spec is None or spec.loader is None:
                raise FedhetError(f"--module {module}: Python cannot load this file as a module")
            loader = spec.loader
            loaded = importlib.util.module_from_spec(spec)
            sys.modules[path.stem] = loaded
            _import_guarded(module, lambda: loader.exec_module(loaded))
        else:
            try:
                _import_guarded(module, lambda: importlib.import_module(module), missing_ok=True)
            except ModuleNotFoundError as error:
                if error.name != module.split(".")[0] and error.name != module:
                    raise _import_failure(module, error) from None
                raise FedhetError(f"--module {module}: no module of that name on the Python path; give a "
                                  "dotted module name importable here, or a path to a .py file") from None


def _import_failure(module: str, error: BaseException) -> FedhetError:
    where = ""
    if isinstance(error, SyntaxError):
        where = f" (line {error.lineno})"
    else:
        frames = [frame for frame in traceback.extract_tb(error.__traceback__)
                  if not frame.filename.startswith("<frozen")]
        if frames:
            where = f" ({frames[-1].filename}, line {frames[-1].lineno})"
    if isinstance(error, SystemExit):
        return FedhetError(f"--module {module}: the module called sys.exit({error.code!r}) while being imported"
                           f"{where}; nothing was checked (a module imported for its registrations must not exit)")
    text = str(error).splitlines()[0] if str(error) else ""
    return FedhetError(f"--module {module}: importing it failed{where}: {type(error).__name__}"
                       f"{': ' + text if text else ''}")


def _import_guarded(module: str, run: Callable[[], Any], *, missing_ok: bool = False) -> None:
    """``run()`` (an import), with the module's own failures turned into one-line errors naming it."""
    try:
        run()
    except FedhetError:
        raise                   # a registration refused (a name registered twice): already one line
    except ModuleNotFoundError as error:
        if missing_ok:
            raise           # the caller tells a dotted name that does not exist from a missing dependency
        raise _import_failure(module, error) from None
    except (Exception, SystemExit) as error:  # noqa: BLE001  (the user's module: any failure is its own)
        raise _import_failure(module, error) from None
