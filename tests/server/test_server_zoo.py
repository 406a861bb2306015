"""The zoo: every registered server method, local solver and participation process gets the same
checks, derived from the registries, so a new registration is checked without being listed here.

- an empty round (no participant) does not crash, and before any client has trained it leaves the
  model bit for bit where it was (no information, no step);
- a run checkpointed after 2 rounds through the real checkpoint files, restored into a fresh
  simulator and run 2 more rounds is bitwise the run of 4 straight rounds (model and every state);
- the multi-process backend gives bitwise the sequential backend's run, and the vectorized backend
  the same to rounding wherever it supports the solver;
- ``server.aware = true`` is accepted or refused exactly as the method's registration declares
  (``gradient_step``, :class:`fedhet.core.registry.ServerRegistry`; docs/algorithms.md section 3):
  a method declared a gradient step steps along the projection of its own step onto FedAWARE's
  direction and resumes bit for bit; a method declared not one refuses it with a ConfigError that
  names the key, quotes the declared reason and says what is allowed.

A method that needs a partner (server "scaffold" trains with client "scaffold") is paired through
the ``algorithm`` table (:data:`fedhet.core.registry.ALGORITHMS`); unpaired servers train with local
SGD and unpaired solvers report to FedAvg. Everything goes through the stable entry points: the
configuration, the registry factories with default options, :class:`Simulator` and the checkpoint
functions; states are compared as the checkpoint sees them, whatever their layout.
"""
from __future__ import annotations

import math
from typing import Any, Optional

import pytest
import torch

import fedhet.components  # noqa: F401  (registers every component)
from fedhet.backends.processes import ProcessPoolBackend, fork_available
from fedhet.backends.vectorized import VectorizedBackend, unsupported_reason
from fedhet.config.schema import load_config
from fedhet.core.options import ConfigError
from fedhet.core.registry import ALGORITHMS, CLIENT_SOLVERS, PARTICIPATION, SERVERS
from fedhet.engine import checkpoint as ckpt
from fedhet.engine.assembly import simulator_from_config
from fedhet.engine.runner import build_federation
from fedhet.engine.simulator import Simulator
from server_baseline_support import ScriptedParticipation, fedaware_direction
from small_run import SMALL

# The small federation (Synthetic(1,1), 12 clients, logistic regression) in float64, without its
# participation settings (each check chooses the process).
FEDERATION = [o for o in SMALL if not o.startswith("participation.")] + ["run.dtype=float64"]
UNIFORM = ["participation.name=uniform", "participation.clients_per_round=4"]


def partner_client(server: str) -> str:
    """The local solver an ``algorithm`` pairs with ``server``; local SGD when none does."""
    return next((pair.client for pair in ALGORITHMS.values() if pair.server == server), "sgd")


def partner_server(client: str) -> str:
    """The server method an ``algorithm`` pairs with ``client``; FedAvg when none does."""
    return next((pair.server for pair in ALGORITHMS.values() if pair.client == client), "fedavg")


# (client, server): every server with its partner, and every solver with its partner.
PAIRS = sorted({(partner_client(s), s) for s in SERVERS.names()} | {(c, partner_server(c)) for c in CLIENT_SOLVERS.names()})
PAIR_IDS = [f"{client}+{server}" for client, server in PAIRS]


def config_for(client: str = "sgd", server: str = "fedavg", participation: Optional[list[str]] = None, *extra: str):
    return load_config(None, [*FEDERATION, *(UNIFORM if participation is None else participation),
                              f"client.name={client}", f"server.name={server}", *extra])


def build(config, *, participation: Any = None, backend: Any = None) -> Simulator:
    """A fresh simulator (fresh federation, so no two runs share a model), assembled as the runner
    assembles it (:func:`fedhet.engine.assembly.simulator_from_config`)."""
    return simulator_from_config(config, build_federation(config, torch.device("cpu")),
                                 participation=participation, backend=backend)


def assert_bitwise(left: Any, right: Any, path: str = "state") -> None:
    """Nested checkpoint data (dicts, sequences, tensors, plain values) equal bit for bit."""
    if isinstance(left, dict):
        assert isinstance(right, dict) and left.keys() == right.keys(), path
        for key in left:
            assert_bitwise(left[key], right[key], f"{path}.{key}")
    elif isinstance(left, (list, tuple)):
        assert type(left) is type(right) and len(left) == len(right), path
        for index, (a, b) in enumerate(zip(left, right)):
            assert_bitwise(a, b, f"{path}[{index}]")
    elif isinstance(left, torch.Tensor):
        assert isinstance(right, torch.Tensor) and left.dtype == right.dtype and torch.equal(left, right), path
    elif isinstance(left, float) and math.isnan(left):
        assert isinstance(right, float) and math.isnan(right), path
    else:
        assert left == right, path


def saved_state(simulator: Simulator) -> dict[str, Any]:
    return ckpt.to_saveable(simulator.state_dict())


def assert_resumes_bitwise(make, tmp_path, rounds: int = 4, split: int = 2) -> None:
    straight = make()
    straight.run(rounds)
    first = make()
    first.run(split)
    ckpt.save_checkpoint(tmp_path, first.state_dict())
    resumed = make()
    resumed.load_state(ckpt.load_checkpoint(tmp_path))
    resumed.run(rounds - split)
    assert torch.equal(resumed.params, straight.params)
    assert_bitwise(saved_state(resumed), saved_state(straight))


# --- empty rounds ------------------------------------------------------------------------------------

@pytest.mark.parametrize("client, server", PAIRS, ids=PAIR_IDS)
def test_an_empty_round_does_not_crash_and_without_any_client_seen_takes_no_step(client, server):
    config = config_for(client, server)
    rows = torch.zeros(4, 12, dtype=torch.bool)
    rows[1, [0, 2, 5]] = True
    rows[3, [1, 2, 3, 7]] = True
    # Known probabilities for the methods that weight by them (known_participation).
    process = ScriptedParticipation(rows, probabilities=torch.full((12,), 0.25, dtype=torch.float64))
    simulator = build(config, participation=process)
    x0 = simulator.params.clone()
    record, cohort = simulator.run_round()
    assert record["num_participants"] == 0 and len(cohort) == 0
    assert torch.equal(simulator.params, x0)
    simulator.run_round()
    assert not torch.equal(simulator.params, x0)           # a round with participants trains
    record, _ = simulator.run_round()                     # empty again, now with clients seen
    assert record["num_participants"] == 0 and torch.isfinite(simulator.params).all()
    simulator.run_round()
    assert torch.isfinite(simulator.params).all()


# --- checkpoints -------------------------------------------------------------------------------------

@pytest.mark.parametrize("client, server", PAIRS, ids=PAIR_IDS)
def test_checkpoint_round_trip_is_bitwise(client, server, tmp_path):
    config = config_for(client, server)
    assert_resumes_bitwise(lambda: build(config), tmp_path)


@pytest.mark.parametrize("name", PARTICIPATION.names())
def test_every_participation_process_resumes_bitwise_and_draws_valid_clients(name, tmp_path):
    if name == "trace":
        # Its clients are those on at the virtual clock's time, so it runs only under a [system] section,
        # which this helper's simulator has not; the same checks with the clock: tests/engine/
        # test_engine_clock.py::test_trace_participation_replays_the_trace_and_resumes_bitwise.
        pytest.skip("trace participation needs the virtual clock (tested in tests/engine/test_engine_clock.py)")
    config = config_for(participation=[f"participation.name={name}"])
    simulator = build(config)
    for _ in range(6):
        _, cohort = simulator.run_round()
        ids = cohort.client_ids
        assert ids.dtype == torch.int64 and ids.dim() == 1
        assert torch.equal(ids, torch.unique(ids)) and (ids.numel() == 0 or 0 <= int(ids.min()) <= int(ids.max()) < 12)
    assert_resumes_bitwise(lambda: build(config), tmp_path)


# --- backends ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pool():
    if not fork_available():
        pytest.skip("the processes backend needs the fork start method")
    backend = ProcessPoolBackend(2)
    yield backend
    backend.close()


@pytest.mark.parametrize("client", CLIENT_SOLVERS.names())
def test_backends_give_the_sequential_run(client, pool):
    """Bitwise for processes; to the rounding of the vectorized backend tests (rtol 1e-9, atol
    1e-12 in float64) for vectorized, where it supports the solver."""
    config = config_for(client, partner_server(client))
    sequential = build(config)
    processes = build(config, backend=pool)
    vectorized = build(config, backend=VectorizedBackend())
    vectorizable = unsupported_reason(vectorized.task, vectorized.solver) is None
    for _ in range(3):
        sequential.run_round()
        processes.run_round()
        if vectorizable:
            vectorized.run_round()
    assert torch.equal(processes.params, sequential.params)
    assert_bitwise(saved_state(processes), saved_state(sequential))
    if vectorizable:
        torch.testing.assert_close(vectorized.params, sequential.params, rtol=1e-9, atol=1e-12)


# --- AWARE -------------------------------------------------------------------------------------------

# The FedAWARE paper's own ruling (AISTATS 2025, Section 5 and Table 2), an independent check of the
# declarations for the server methods it rules on: it applies the AWARE extension to FedAvg, FedAvgM,
# FedYogi and FedAMS (and to FedProx and FedCM, local solvers that run with FedAvg's server), and
# leaves out FedDyn, "which does not follow the global gradient descent rule". Every other method
# is checked against its declaration alone.
FEDAWARE_PAPER_RULING = {"fedavg": True, "fedavgm": True, "fedyogi": True, "fedams": True, "feddyn": False}


@pytest.mark.parametrize("server", SERVERS.names())
def test_aware_is_accepted_or_refused_as_each_method_declares(server, tmp_path):
    client = partner_client(server)
    config = config_for(client, server, None, "server.aware=true")
    # The declaration, for this run's options (FedSpeed's depends on its solver's variant).
    entry = SERVERS.get(server)
    reason = entry.not_a_gradient_step(config.server.options, config.client.options if entry.client else None)
    if server in FEDAWARE_PAPER_RULING:
        assert (reason is None) == FEDAWARE_PAPER_RULING[server], f"{server}: declared {entry.gradient_step!r}"
    if reason is not None:
        with pytest.raises(ConfigError) as refused:
            build(config)
        message = str(refused.value)
        assert message.startswith("server.aware = True: ") and "Proposition 3.1" in message, message
        assert reason in message and message.endswith("allowed: false"), message
        return
    aware = build(config)                                # a declared gradient step must take AWARE
    plain = build(config_for(client, server))
    x0 = plain.params.clone()
    plain.run_round()
    record, cohort = aware.run_round()                   # the same cohort: same seed and process
    d = fedaware_direction(cohort.pseudo_gradients)      # round 1: momenta alpha g_i, normalised
    u = x0 - plain.params
    torch.testing.assert_close(x0 - aware.params, (u @ d) / (d @ d) * d, rtol=0, atol=1e-10)
    assert "aware_cosine" in record
    parallel = math.isclose(abs(float(u @ d / (u.norm() * d.norm()))), 1.0, rel_tol=1e-9)
    assert parallel or not torch.allclose(aware.params, plain.params)   # FedAWARE's own step is parallel
    for _ in range(3):                                   # every later round is projected and reports it
        record, _ = aware.run_round()
        assert math.isfinite(record["aware_cosine"]) and math.isfinite(record["solver_gap"])
    # With empty rounds (heterogeneous participation, mean 0.1 of 12 clients) it resumes bit for bit.
    heterogeneous = ["participation.name=heterogeneous", "participation.mean=0.3"]
    assert_resumes_bitwise(lambda: build(config_for(client, server, heterogeneous, "server.aware=true")),
                           tmp_path, rounds=6, split=3)
