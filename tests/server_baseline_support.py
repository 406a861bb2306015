"""Helpers shared by the server-baseline tests (not a test module).

Tiny federations (the least-squares problem, float64, full-batch or minibatch local SGD), a
participation process that replays a fixed ``[T, N]`` matrix (for exact, empty-round-including
schedules), direct calls of a server on hand-made cohorts, and the checkpoint round trip through
bytes that the runner uses, and FedAWARE's direction computed by enumeration (independent of
the server's solver).
"""
from __future__ import annotations

import io
import itertools
import math
from typing import Any, Optional

import torch

import fedhet.components  # noqa: F401  (registers the components)
from fedhet.core.cohort import Cohort
from fedhet.core.options import build_options
from fedhet.core.registry import CLIENT_SOLVERS, SERVERS
from fedhet.core.store import ClientStore, StoreOptions
from fedhet.engine import checkpoint
from fedhet.participation.base import ids_from_mask
from fedhet.problems.least_squares import make_least_squares
from fedhet.server.base import ServerContext


def build_server(name: str, **values: Any):
    """The registered server ``name`` with ``values`` validated as the ``[server]`` section."""
    entry = SERVERS.get(name)
    return entry.factory(build_options(entry.options_cls, values, section="server"))


def build_solver(name: str = "sgd", **values: Any):
    entry = CLIENT_SOLVERS.get(name)
    return entry.factory(build_options(entry.options_cls, values, section="client"))


def problem(num_clients: int = 6, *, sizes: Optional[list[int]] = None, seed: int = 0):
    """A heterogeneous float64 least-squares federation with ``dim = 3``."""
    sizes = sizes or [6 + 2 * (i % 3) for i in range(num_clients)]
    return make_least_squares(num_clients=num_clients, dim=3, examples_per_client=sizes, seed=seed)


class ScriptedParticipation:
    """Replays a fixed boolean ``[T, N]`` participation matrix (round t = row t; rows may be empty)."""

    def __init__(self, matrix: torch.Tensor, probabilities: Optional[torch.Tensor] = None):
        self.matrix = matrix.to(torch.bool)
        self.known = probabilities

    def init(self, context) -> dict[str, Any]:
        return {}

    def sample(self, state, round_index, context):
        return ids_from_mask(self.matrix[round_index]), state

    def probabilities(self, state) -> Optional[torch.Tensor]:
        return self.known

    def explores(self) -> bool:
        return False


def simulator(federation, server, *, participation=None, solver=None, seed: int = 0,
              store_dtype: str = "float64", label_counts: Optional[torch.Tensor] = None):
    solver = solver or build_solver("sgd", learning_rate=0.05, batch_size=4, steps=2)
    return federation.simulator(solver=solver, server=server, participation=participation, seed=seed,
                                store_options=StoreOptions(dtype=store_dtype),
                                client_label_counts=label_counts)


def through_bytes(state: dict[str, Any]) -> dict[str, Any]:
    """A simulator state saved and loaded as the runner's checkpoint does (stores as snapshots)."""
    buffer = io.BytesIO()
    torch.save(checkpoint.to_saveable(state), buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


def assert_resume_is_bitwise(make_simulator, rounds: int, split: int) -> None:
    """``rounds`` rounds in one go equal ``split`` rounds, a save/load through bytes into a freshly
    built simulator (new server object, new stores), and the remaining rounds."""
    straight = make_simulator()
    straight.run(rounds)
    first = make_simulator()
    first.run(split)
    saved = through_bytes(first.state_dict())
    resumed = make_simulator()
    resumed.load_state(saved)
    resumed.run(rounds - split)
    assert torch.equal(resumed.params, straight.params)
    assert_states_equal(resumed.server_state, straight.server_state)


def assert_states_equal(left: Any, right: Any, path: str = "server") -> None:
    """Bitwise equality of nested server states (stores compared by table and written mask)."""
    if isinstance(left, ClientStore):
        assert isinstance(right, ClientStore), path
        assert torch.equal(left.table, right.table), path
        assert torch.equal(left.written, right.written), path
    elif isinstance(left, dict):
        assert left.keys() == right.keys(), path
        for key in left:
            assert_states_equal(left[key], right[key], f"{path}.{key}")
    elif isinstance(left, tuple) and hasattr(left, "_fields"):          # a typed (NamedTuple) state
        assert type(left) is type(right), path
        for key in left._fields:
            assert_states_equal(getattr(left, key), getattr(right, key), f"{path}.{key}")
    elif isinstance(left, (list, tuple)):
        assert len(left) == len(right), path
        for index, (a, b) in enumerate(zip(left, right)):
            assert_states_equal(a, b, f"{path}[{index}]")
    elif isinstance(left, torch.Tensor):
        assert torch.equal(left, right), path
    else:
        assert left == right, path


def context(num_clients: int, dim: int, *, round_index: int = 0, probabilities: Optional[torch.Tensor] = None,
            dtype: torch.dtype = torch.float64):
    """A :class:`ServerContext` for calling a server directly, with in-memory float64 stores."""
    def make_store(name, subset=None):
        return ClientStore(name, num_clients, dim, options=StoreOptions(dtype="float64"), subset=subset,
                           compute_dtype=dtype)
    return ServerContext(round_index=round_index, num_clients=num_clients, make_store=make_store,
                         participation_probabilities=probabilities)


def cohort(client_ids, deltas: torch.Tensor, *, num_examples=None, local_steps=None) -> Cohort:
    """A hand-made cohort; ``num_examples`` default 10 each, ``local_steps`` default 1 each."""
    ids = torch.as_tensor(client_ids, dtype=torch.int64)
    count = ids.numel()
    examples = torch.as_tensor(num_examples if num_examples is not None else [10] * count, dtype=torch.int64)
    steps = torch.as_tensor(local_steps if local_steps is not None else [1] * count, dtype=torch.int64)
    return Cohort(ids, deltas, examples, steps, torch.zeros(count, dtype=deltas.dtype))


def exact_min_norm(gram):
    """argmin w^T Q w over the simplex, by enumerating supports (independent of the solver)."""
    n = gram.shape[0]
    best, best_value = None, math.inf
    for size in range(1, n + 1):
        for support in itertools.combinations(range(n), size):
            idx = torch.tensor(support)
            kkt = torch.zeros(size + 1, size + 1, dtype=torch.float64)
            kkt[:size, :size] = gram[idx][:, idx]
            kkt[:size, size] = -1.0
            kkt[size, :size] = 1.0
            rhs = torch.zeros(size + 1, 1, dtype=torch.float64)
            rhs[size] = 1.0
            solution = torch.linalg.lstsq(kkt, rhs, driver="gelsd").solution[:, 0]
            if float((kkt @ solution - rhs[:, 0]).abs().max()) > 1e-9 or float(solution[:size].min()) < -1e-12:
                continue
            w = torch.zeros(n, dtype=torch.float64)
            w[idx] = solution[:size].clamp_min(0)
            value = float(w @ gram @ w)
            if value < best_value:
                best, best_value = w / w.sum(), value
    return best


def fedaware_direction(momenta):
    """d of FedAWARE with normalised momenta (the default), computed directly."""
    unit = momenta / momenta.norm(dim=1, keepdim=True)
    return exact_min_norm(unit @ unit.T) @ unit
