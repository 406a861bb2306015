"""Every server part that keeps per-client tables, on its fast kernel and on the plain reference
beside it (``server.kernel``, ``server.aware_kernel``; issue 26 item 2).

Registry-derived: the cases are every registered server method, and every method that accepts the
AWARE transform (``server.aware = true``) with it, whose ``init`` asks the context for a per-client
store (``make_store``). A method with a table of its own must declare ``kernel``; AWARE's is
``aware_kernel``. Each case runs on both kernels and the tests check:

- which code ran: the reference run calls no fast kernel and the fast run no reference function
  (counted by wrapping both sets), so a kernel option that selects nothing fails here;
- bitwise, with the same uploads every round (server called directly): the tables (FedAWARE's and
  AWARE's momenta ``m_i``, FedVarp's and MIFA's ``y_n``), which both kernels compute with the same
  roundings (bfloat16, float32 and float64 stores);
- float64, a few rounds of a tiny least-squares federation through the simulator: the final
  parameters within ``PARAMS_TOL`` (relative and absolute; the parameters are of order 1). The
  kernels differ only in summation order (Gram entries, the sum of the ``y_n``, ``d``: relative
  differences of order 1e-16 per round) and in the min-norm solver (pairwise Frank-Wolfe against
  projected gradient, both run to the rounding floor with ``solver_tol = 0``), and the rounds
  compound them: the largest difference measured is 5e-14 absolute (6e-13 relative, FedAWARE),
  so 1e-10 leaves a margin of about 200;
- on one state (the fast run's last), the min-norm weights ``lambda`` of the two solvers within
  ``LAMBDA_ATOL`` (a positive definite ``Q``: the momenta of 5 clients in 8 dimensions, so
  ``lambda`` is unique; measured 5e-14), and the incrementally kept Gram matrix against
  ``Q = M M^T`` within ``GRAM_RTOL`` (measured 4e-16 relative).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

import fedhet.components  # noqa: F401  (registers the components)
from fedhet.algorithms import build_parts
from fedhet.client.base import with_effective_steps
from fedhet.core.cohort import Cohort
from fedhet.core.options import ConfigError, build_options
from fedhet.core.registry import CLIENT_SOLVERS, SERVERS
from fedhet.core.store import ClientStore, StoreOptions
from fedhet.participation.uniform import UniformOptions, UniformParticipation
from fedhet.participation.warmup import with_warmup
from fedhet.problems.least_squares import make_least_squares
from fedhet.server import aware_direction, latest_updates
from fedhet.server.aware_direction import MomentumDirection
from fedhet.server.aware_options import KERNELS
from server_baseline_support import context as server_context

NUM_CLIENTS, DIM, ROUNDS = 5, 8, 6
PROBABILITIES = torch.full((NUM_CLIENTS,), 0.6)    # for known_participation (3 of 5, as simulated)
PARAMS_TOL = 1e-10
LAMBDA_ATOL = 1e-11
GRAM_RTOL = 1e-13
SOLVER = {"learning_rate": 0.05, "batch_size": 4, "steps": 2}
# The fast kernels and the reference functions, by module: each run must call only its own set.
FAST = {aware_direction: ("_fast_observe", "_weighted_rows", "min_norm_weights"),
        latest_updates: ("_incremental_sum",)}
REFERENCE = {aware_direction: ("reference_momenta", "reference_gram", "reference_weights", "reference_step"),
             latest_updates: ("reference_sum",)}


def _server_options(name: str, values: dict[str, Any]) -> Any:
    entry = SERVERS.get(name)
    return build_options(entry.options_cls, values, section="server")


def _build(name: str, values: dict[str, Any]):
    """``(solver, server)`` of server ``name`` with ``values``, paired with the client it needs."""
    client = SERVERS.get(name).client or "sgd"
    client_options = build_options(CLIENT_SOLVERS.get(client).options_cls, SOLVER, section="client")
    return build_parts(client, client_options, name, _server_options(name, values))


def _stores_made(server) -> list[str]:
    made: list[str] = []

    def make_store(name, subset=None):
        made.append(name)
        return ClientStore(name, NUM_CLIENTS, DIM, subset=subset, compute_dtype=torch.float64)

    server.init(torch.zeros(DIM, dtype=torch.float64),
                dataclasses.replace(server_context(NUM_CLIENTS, DIM, probabilities=PROBABILITIES), make_store=make_store))
    return made


def _kernel_fields(name: str, values: dict[str, Any]) -> list[str]:
    """The options of this case that choose a table kernel: ``kernel`` (the method's own tables)
    and ``aware_kernel`` when AWARE is on."""
    fields = {f.name: f for f in dataclasses.fields(SERVERS.get(name).options_cls)}
    chosen = [key for key in ("kernel", "aware_kernel") if key in fields
              and fields[key].metadata.get("choices") == KERNELS]
    return [key for key in chosen if key != "aware_kernel" or values.get("aware")]


def _cases() -> list[tuple[str, dict[str, Any]]]:
    cases = []
    for name in sorted(SERVERS.names()):
        for values in ({}, {"aware": True}):
            try:
                _, server = _build(name, values)
            except ConfigError:          # a method that is not a gradient step refuses AWARE
                continue
            made = _stores_made(server)
            if made:
                cases.append((name, values))
    return cases


CASES = _cases()
IDS = [name + ("+aware" if values else "") for name, values in CASES]


def test_the_cases_are_the_store_holding_methods():
    # The derivation must find the four (FedAWARE, FedVarp, MIFA, and AWARE on every accepting
    # method); an empty or tiny list would make the tests below vacuous.
    plain = {name for name, values in CASES if not values}
    assert plain == {"fedaware", "fedvarp", "mifa"}
    assert {"fedavg", "fedyogi", "fedvarp", "fedaware"} <= {name for name, values in CASES if values}
    assert not any(name == "feddyn" for name, _ in CASES if _)


@pytest.mark.parametrize("name,values", CASES, ids=IDS)
def test_every_store_holding_method_declares_its_kernel(name, values):
    fields = _kernel_fields(name, values)
    own = [store for store in _stores_made(_build(name, values)[1]) if store != "aware_momentum"]
    if own:
        assert "kernel" in fields, f"{name} keeps per-client tables {own} but has no server.kernel option"
    if values.get("aware"):
        assert "aware_kernel" in fields


def _with_kernel(name: str, values: dict[str, Any], kernel: str) -> dict[str, Any]:
    chosen = {key: kernel for key in _kernel_fields(name, values)}
    # Every min-norm solve to the rounding floor (FedMGDA+'s own too: a solver stopped at a loose
    # gap turns rounding differences into jumps), so that the runs agree to rounding (module docstring).
    fields = {f.name for f in dataclasses.fields(SERVERS.get(name).options_cls)}
    tolerances = {key: 0.0 for key in ("solver_tol", "aware_solver_tol")
                  if key in fields and (key == "solver_tol" or values.get("aware"))}
    return {**values, **chosen, **tolerances}


@pytest.fixture
def calls(monkeypatch):
    """Counts of the calls of every fast kernel and reference function."""
    counts = {"fast": 0, "reference": 0}
    for kind, table in (("fast", FAST), ("reference", REFERENCE)):
        for module, names in table.items():
            for function_name in names:
                original = getattr(module, function_name)

                def counted(*args, _original=original, _kind=kind, **kwargs):
                    counts[_kind] += 1
                    return _original(*args, **kwargs)
                monkeypatch.setattr(module, function_name, counted)
    return counts


def _problem():
    return make_least_squares(num_clients=NUM_CLIENTS, dim=DIM, examples_per_client=[10, 12, 16, 11, 14], seed=1)


def _simulate(name: str, values: dict[str, Any], kernel: str):
    problem = _problem()
    solver, server = _build(name, _with_kernel(name, values, kernel))
    participation = UniformParticipation(UniformOptions(clients_per_round=3))
    simulator = problem.simulator(solver=solver, server=server, participation=participation, seed=3)
    simulator.run(ROUNDS)
    return simulator


@pytest.mark.parametrize("name,values", CASES, ids=IDS)
def test_fast_and_reference_kernels_give_the_same_run(name, values, calls):
    fast = _simulate(name, values, "fast")
    assert calls["fast"] > 0 and calls["reference"] == 0, calls
    calls["fast"] = 0
    reference = _simulate(name, values, "reference")
    assert calls["reference"] > 0 and calls["fast"] == 0, calls
    assert not torch.equal(fast.params, _problem().initial_params)      # the runs did move
    torch.testing.assert_close(reference.params, fast.params, rtol=PARAMS_TOL, atol=PARAMS_TOL)


def _stores(state: Any) -> list[ClientStore]:
    if isinstance(state, ClientStore):
        return [state]
    if isinstance(state, tuple):
        return [store for item in state for store in _stores(item)]
    return []


def _cohorts(dtype: torch.dtype) -> list[Cohort]:
    generator = torch.Generator().manual_seed(5)
    rounds = [[0, 2, 3], [1, 4], [0, 1, 2, 3, 4], [2], [3, 4, 0]]
    return [Cohort(torch.tensor(ids), torch.randn(len(ids), DIM, generator=generator).to(dtype),
                   torch.tensor([6 + i for i in ids]), torch.full((len(ids),), 2), torch.zeros(len(ids), dtype=dtype))
            for ids in rounds]


@pytest.mark.parametrize("store_dtype", ["bfloat16", "float32", "float64"])
@pytest.mark.parametrize("name,values", CASES, ids=IDS)
def test_both_kernels_write_bitwise_the_same_tables(name, values, store_dtype):
    dtype = torch.float64 if store_dtype == "float64" else torch.float32     # the run's compute dtype

    def run(kernel):
        solver, server = _build(name, _with_kernel(name, values, kernel))

        def make_store(store_name, subset=None):
            return ClientStore(store_name, NUM_CLIENTS, DIM, options=StoreOptions(dtype=store_dtype),
                               subset=subset, compute_dtype=dtype)
        context = dataclasses.replace(server_context(NUM_CLIENTS, DIM, dtype=dtype, probabilities=PROBABILITIES), make_store=make_store)
        params = torch.zeros(DIM, dtype=dtype)
        state = server.init(params, context)
        for round_index, cohort in enumerate(_cohorts(dtype)):
            cohort = with_effective_steps(cohort, solver, SOLVER["learning_rate"])      # FedNova's a_i
            params, state, _ = server.step(state, params, cohort,
                                           dataclasses.replace(context, round_index=round_index))
        return params, state

    fast_params, fast_state = run("fast")
    reference_params, reference_state = run("reference")
    fast_stores, reference_stores = _stores(fast_state), _stores(reference_state)
    assert fast_stores and len(fast_stores) == len(reference_stores)
    for fast_store, reference_store in zip(fast_stores, reference_stores):
        assert fast_store.name == reference_store.name
        assert torch.equal(fast_store.table, reference_store.table), fast_store.name
        assert torch.equal(fast_store.written, reference_store.written), fast_store.name
    if dtype == torch.float64:
        torch.testing.assert_close(reference_params, fast_params, rtol=PARAMS_TOL, atol=PARAMS_TOL)


def _directions(server) -> list[MomentumDirection]:
    stages = [server.aggregator, *server.transforms]
    return [value for stage in stages for value in vars(stage).values() if isinstance(value, MomentumDirection)]


@pytest.mark.parametrize("name,values", [case for case in CASES if _directions(_build(*case)[1])],
                         ids=[i for i, case in zip(IDS, CASES) if _directions(_build(*case)[1])])
def test_the_reference_solver_finds_the_same_weights_and_gram(name, values):
    simulator = _simulate(name, values, "fast")
    server, state = simulator.server, simulator.server_state
    stage_states = [state.aggregator, *state.transforms]
    checked = 0
    for stage, stage_state in zip([server.aggregator, *server.transforms], stage_states):
        for direction in [v for v in vars(stage).values() if isinstance(v, MomentumDirection)]:
            reference = MomentumDirection(dataclasses.replace(direction.settings, kernel="reference"))
            fast_weights, reference_weights = direction.weights(stage_state), reference.weights(stage_state)
            assert float(fast_weights.sum()) == pytest.approx(1.0, abs=1e-12)
            torch.testing.assert_close(reference_weights, fast_weights, rtol=0, atol=LAMBDA_ATOL)
            full = aware_direction.reference_gram(stage_state.momenta)
            torch.testing.assert_close(stage_state.gram, full, rtol=GRAM_RTOL, atol=0)
            checked += 1
    assert checked >= 1


@pytest.mark.parametrize("values, explore", [
    ({"normalize": False}, False),
    ({"uniform_weights": True}, False),
    ({"alpha": 0.3}, True),
], ids=["raw-momenta", "uniform-weights-NA", "explore-warmup"])
def test_fedaware_options_agree_on_both_kernels(values, explore):
    # The options the registry-derived run leaves at their defaults: the papers' Eq. (2) on raw
    # momenta, the NA ablation, and the FedAvg warm-up of the exploration sweep.
    def run(kernel):
        problem = _problem()
        solver, server = _build("fedaware", {**values, "kernel": kernel, "solver_tol": 0.0})
        participation = with_warmup(UniformParticipation(UniformOptions(clients_per_round=2, explore=explore)),
                                    UniformOptions(clients_per_round=2, explore=explore))
        simulator = problem.simulator(solver=solver, server=server, participation=participation, seed=3)
        simulator.run(ROUNDS)
        return simulator.params

    fast, reference = run("fast"), run("reference")
    assert not torch.equal(fast, _problem().initial_params)
    torch.testing.assert_close(reference, fast, rtol=PARAMS_TOL, atol=PARAMS_TOL)


def test_an_unknown_kernel_is_refused_in_the_options_and_by_the_building_blocks():
    with pytest.raises(ConfigError, match=r"server\.kernel"):
        _server_options("mifa", {"kernel": "dense"})
    with pytest.raises(ConfigError, match=r"server\.aware_kernel"):
        _server_options("fedavg", {"aware": True, "aware_kernel": "dense"})
    with pytest.raises(ValueError, match="kernel must be one of fast, reference, got 'dense'"):
        latest_updates.LatestUpdateTable("mifa-memory", "dense")
    with pytest.raises(ValueError, match="kernel must be one of fast, reference, got 'dense'"):
        MomentumDirection(aware_direction.DirectionSettings(kernel="dense"))
