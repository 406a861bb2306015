"""The AWARE extension (server/aware.py; FedAWARE Proposition 3.1) and its wiring through compose."""
import dataclasses
import math

import pytest
import torch

import fedhet.components  # noqa: F401  (registers the servers)
from fedhet.algorithms import server_for
from fedhet.client.base import ClientOptions
from fedhet.core.cohort import Cohort
from fedhet.core.options import ConfigError, build_options
from fedhet.core.registry import CLIENT_SOLVERS, SERVERS, NotAGradientStep
from fedhet.core.store import ClientStore, StoreOptions
from fedhet.participation.uniform import UniformOptions, UniformParticipation
from fedhet.problems.least_squares import full_batch_options, make_least_squares
from fedhet.server.averaging import WeightedAverageAggregator
from fedhet.server.aware import AwareProjection, project_onto
from fedhet.server.base import ServerContext, ServerOptions, SGDOptimizer
from fedhet.server.methods import refuse_aware_unless_gradient_step, server_method
from server_baseline_support import fedaware_direction

F64 = torch.float64

# Every registered server method built from its own options alone (the ones built with their
# solver's options are checked in the zoo, tests/server/test_server_zoo.py) whose registration
# declares its update a gradient step x <- x - u with default options.
GRADIENT_STEP_METHODS = [name for name in SERVERS.names() if SERVERS.get(name).client is None
                         and SERVERS.get(name).not_a_gradient_step(SERVERS.get(name).options_cls()) is None]


@pytest.fixture
def registered_server():
    """Register scratch server methods; removed again afterwards so the zoo tests do not see them."""
    names = []

    def register(name, factory, **declarations):
        SERVERS.register(name, ServerOptions, replace=True, **declarations)(factory)
        names.append(name)

    yield register
    for name in names:
        SERVERS._entries.pop(name, None)


def context(num_clients, dim):
    def make_store(name, subset=None):
        return ClientStore(name, num_clients, dim, subset=subset, compute_dtype=F64)
    return ServerContext(round_index=0, num_clients=num_clients, make_store=make_store)


def cohort(ids, updates, sizes=None):
    ids = torch.tensor(ids, dtype=torch.int64)
    count = len(ids)
    num_examples = torch.tensor(sizes or [10] * count, dtype=torch.int64)
    return Cohort(ids, -updates, num_examples, torch.full((count,), 3, dtype=torch.int64), torch.zeros(count, dtype=updates.dtype))


def server(name, **values):
    entry = SERVERS.get(name)
    return entry.factory(build_options(entry.options_cls, values, section="server"))


# --- the projection ----------------------------------------------------------------------------------

@pytest.mark.parametrize("scale", [2.5, -0.3, 1e-6])
def test_projection_of_a_direction_parallel_to_d_is_the_identity(scale):
    d = torch.tensor([0.3, -1.2, 2.0, 0.0, 0.7])
    projected, ratio, cosine = project_onto(scale * d, d)
    assert torch.allclose(projected, scale * d, rtol=1e-6, atol=0)
    assert math.isclose(ratio, scale, rel_tol=1e-6)
    assert math.isclose(cosine, math.copysign(1.0, scale), rel_tol=1e-6)


def test_projection_of_an_orthogonal_step_is_zero_and_a_zero_direction_gives_no_step():
    d = torch.tensor([1.0, 2.0, 0.0], dtype=F64)
    projected, _, cosine = project_onto(torch.tensor([-2.0, 1.0, 5.0], dtype=F64), d)
    assert torch.equal(projected, torch.zeros(3, dtype=F64)) and cosine == 0.0
    projected, _, cosine = project_onto(torch.tensor([1.0, 1.0, 1.0], dtype=F64), torch.zeros(3, dtype=F64))
    assert torch.equal(projected, torch.zeros(3, dtype=F64)) and cosine == 0.0


def test_projection_matches_the_formula_of_proposition_3_1():
    generator = torch.Generator().manual_seed(0)
    u, d = torch.randn(7, dtype=F64, generator=generator), torch.randn(7, dtype=F64, generator=generator)
    projected, _, cosine = project_onto(u, d)
    assert torch.allclose(projected, (u @ d) / (d @ d) * d, atol=1e-14)
    assert math.isclose(cosine, float(u @ d / (u.norm() * d.norm())), rel_tol=1e-12)


# --- composition -------------------------------------------------------------------------------------

def test_compose_adds_the_transform_only_when_asked():
    plain = server_method(WeightedAverageAggregator(), SGDOptimizer(1.0), ServerOptions())
    aware = server_method(WeightedAverageAggregator(), SGDOptimizer(1.0), ServerOptions(aware=True, aware_alpha=0.2))
    assert plain.transforms == ()
    assert len(aware.transforms) == 1 and isinstance(aware.transforms[0], AwareProjection)
    assert aware.transforms[0].direction.settings.alpha == 0.2
    assert aware.transforms[0].direction.settings.store_name == "aware_momentum"


def test_a_method_that_is_not_a_gradient_step_refuses_aware():
    reason = "FedDyn's server sets x <- mean_S w_i - h/alpha"
    refuse_aware_unless_gradient_step(ServerOptions(), reason)          # without aware: nothing to refuse
    assert server_method(WeightedAverageAggregator(), SGDOptimizer(1.0), ServerOptions()).transforms == ()
    refuse_aware_unless_gradient_step(ServerOptions(aware=True), None)  # a gradient step takes it
    with pytest.raises(ConfigError, match=r"server.aware = True: .*Proposition 3.1.*FedDyn's server sets.*allowed: false"):
        refuse_aware_unless_gradient_step(ServerOptions(aware=True), reason)


def test_a_registration_declaring_no_gradient_step_refuses_aware_when_built(registered_server):
    """The declaration alone decides, through the one assembly path (fedhet.algorithms.server_for):
    the factory below would happily add the projection."""
    def factory(options):
        return server_method(WeightedAverageAggregator(), SGDOptimizer(options.learning_rate), options)

    registered_server("declared_not_a_step", factory, gradient_step=NotAGradientStep("it sets x from a dual"))
    registered_server("declared_by_rule", factory,
                      gradient_step=lambda options: NotAGradientStep("lr above 1") if options.learning_rate > 1 else True)
    solver = CLIENT_SOLVERS.get("sgd").factory(ClientOptions())
    assert server_for(solver, "declared_not_a_step", ServerOptions()).transforms == ()
    with pytest.raises(ConfigError, match=r"server.aware = True: .*Proposition 3.1.*it sets x from a dual.*allowed: false"):
        server_for(solver, "declared_not_a_step", ServerOptions(aware=True))
    assert len(server_for(solver, "declared_by_rule", ServerOptions(aware=True)).transforms) == 1
    with pytest.raises(ConfigError, match="server.aware = True: .*lr above 1"):
        server_for(solver, "declared_by_rule", ServerOptions(aware=True, learning_rate=2.0))


def test_fedavg_with_aware_steps_along_the_projection_of_its_own_step():
    generator = torch.Generator().manual_seed(2)
    g1, g2 = torch.randn(3, 9, dtype=F64, generator=generator), torch.randn(2, 9, dtype=F64, generator=generator)
    ctx = context(4, 9)
    x0 = torch.zeros(9, dtype=F64)
    method = server("fedavg", aware=True, aware_alpha=0.5, learning_rate=0.8)
    state = method.init(x0, ctx)
    x1, state, _ = method.step(state, x0, cohort([0, 1, 3], g1, [10, 20, 30]), ctx)
    x2, state, metrics = method.step(state, x1, cohort([1, 2], g2, [20, 60]), ctx)
    # Independent transcription: FedAvg step u = eta sum p_i g_i; AWARE momenta; projection.
    m = torch.zeros(4, 9, dtype=F64)
    m[[0, 1, 3]] = 0.5 * g1
    u1 = 0.8 * (torch.tensor([1, 2, 3], dtype=F64) / 6) @ g1
    d1 = fedaware_direction(m[[0, 1, 3]])
    m[1], m[2] = 0.5 * m[1] + 0.5 * g2[0], 0.5 * g2[1]
    u2 = 0.8 * torch.tensor([0.25, 0.75], dtype=F64) @ g2
    d2 = fedaware_direction(m)
    assert torch.allclose(x1, -(u1 @ d1) / (d1 @ d1) * d1, atol=1e-10)
    assert torch.allclose(x2 - x1, -(u2 @ d2) / (d2 @ d2) * d2, atol=1e-10)
    assert math.isclose(metrics["aware_cosine"], float(u2 @ d2 / (u2.norm() * d2.norm())), rel_tol=1e-8)
    assert math.isclose(metrics["update_norm"], float(((u2 @ d2) / d2.norm()).abs()), rel_tol=1e-8)


def test_fedaware_with_aware_is_fedaware():
    """The issue's equivalence: FedAWARE's own step is parallel to AWARE's d (same momenta), so
    projecting it changes nothing."""
    generator = torch.Generator().manual_seed(4)
    ctx = context(6, 15)
    plain, aware = server("fedaware", alpha=0.3), server("fedaware", alpha=0.3, aware=True, aware_alpha=0.3)
    x_plain = x_aware = torch.randn(15, dtype=F64, generator=generator)
    s_plain, s_aware = plain.init(x_plain, ctx), aware.init(x_aware, ctx)
    for _ in range(6):
        ids = sorted(torch.randperm(6, generator=generator)[:3].tolist())
        c = cohort(ids, torch.randn(3, 15, dtype=F64, generator=generator))
        x_plain, s_plain, _ = plain.step(s_plain, x_plain, c, ctx)
        x_aware, s_aware, metrics = aware.step(s_aware, x_aware, c, ctx)
        assert math.isclose(metrics["aware_cosine"], 1.0, rel_tol=1e-9)
    assert torch.allclose(x_aware, x_plain, rtol=0, atol=1e-12)


def _least_squares_simulator(problem, method):
    solver = CLIENT_SOLVERS.get("sgd").factory(full_batch_options(problem, ClientOptions, learning_rate=0.05, steps=3))
    return problem.simulator(solver=solver, server=method, participation=UniformParticipation(UniformOptions(clients_per_round=3)),
                             seed=7, store_options=StoreOptions())


@pytest.mark.parametrize("name", GRADIENT_STEP_METHODS)
def test_aware_composes_with_every_registered_gradient_step_method(name):
    """No per-method code: server.aware = true through the registry projects whatever step the
    method takes onto FedAWARE's d (checked in round 1, where both runs see the same cohort, and
    then that every later step is parallel to the transform's d)."""
    if name not in SERVERS:
        pytest.skip(f"server {name!r} is not registered yet")
    problem = make_least_squares(num_clients=6, dim=12, examples_per_client=14, seed=3)
    plain = _least_squares_simulator(problem, server(name))
    aware = _least_squares_simulator(problem, server(name, aware=True))
    x0 = plain.params.clone()
    plain.run_round()
    _, first_cohort = aware.run_round()
    d = fedaware_direction(first_cohort.pseudo_gradients)     # alpha scales all momenta alike
    u = x0 - plain.params
    assert torch.allclose(x0 - aware.params, (u @ d) / (d @ d) * d, atol=1e-10), name
    for _ in range(3):
        before = aware.params.clone()
        record, c = aware.run_round()
        direction, _ = aware.server.transforms[0].direction.direction(aware.server_state.transforms[0], c)
        step = before - aware.params
        if float(step.norm()) > 0:
            cosine = float(step @ direction / (step.norm() * direction.norm()))
            assert math.isclose(abs(cosine), 1.0, rel_tol=1e-9), name
        assert "aware_cosine" in record and "solver_gap" in record


def test_feddyn_refuses_aware_when_registered():
    if "feddyn" not in SERVERS:
        pytest.skip("feddyn is not registered")
    from fedhet.algorithms import build_parts
    from fedhet.algorithms.feddyn import FedDynOptions
    with pytest.raises(ConfigError, match="server.aware"):
        build_parts("feddyn", FedDynOptions(), "feddyn", ServerOptions(aware=True))


def test_unknown_aware_layer_is_a_config_error_naming_the_aware_option():
    method = server("fedavg", aware=True, aware_momentum_layers=["nope"])
    problem = make_least_squares(num_clients=3, dim=4, examples_per_client=6, seed=0)
    with pytest.raises(ConfigError, match="server.aware_momentum_layers"):
        _least_squares_simulator(problem, method)


# --- warm-up: with participation.explore the projection waits until every client is seen ------------

def test_with_explore_the_projection_waits_until_the_sweep_has_filled_the_memory():
    """Hand-made case (FedAWARE Algorithm 1 with the authors' exploration sweep): 4 clients; round 1
    sees clients 0, 1, 3 (client 2 unseen), so FedAvg+AWARE steps exactly like FedAvg; round 2 sees
    client 2, the memory is full, and the step is FedAvg's projected onto d over all four momenta."""
    generator = torch.Generator().manual_seed(2)
    g1, g2 = torch.randn(3, 9, dtype=F64, generator=generator), torch.randn(2, 9, dtype=F64, generator=generator)
    ctx = dataclasses.replace(context(4, 9), participation_explore=True)
    x0 = torch.zeros(9, dtype=F64)
    method = server("fedavg", aware=True, aware_alpha=0.5, learning_rate=0.8)
    state = method.init(x0, ctx)
    x1, state, metrics1 = method.step(state, x0, cohort([0, 1, 3], g1, [10, 20, 30]), ctx)
    u1 = 0.8 * (torch.tensor([1, 2, 3], dtype=F64) / 6) @ g1
    assert torch.allclose(x1, -u1, rtol=0, atol=1e-12)                 # FedAvg's own step, unprojected
    assert metrics1["aware_warmup"] == 1.0 and metrics1["aware_num_seen"] == 3.0
    x2, state, metrics2 = method.step(state, x1, cohort([1, 2], g2, [20, 60]), ctx)
    m = torch.zeros(4, 9, dtype=F64)
    m[[0, 1, 3]] = 0.5 * g1                                               # the momenta were kept during warm-up
    m[1], m[2] = 0.5 * m[1] + 0.5 * g2[0], 0.5 * g2[1]
    u2 = 0.8 * torch.tensor([0.25, 0.75], dtype=F64) @ g2
    d2 = fedaware_direction(m)
    assert torch.allclose(x2 - x1, -(u2 @ d2) / (d2 @ d2) * d2, atol=1e-10)
    assert metrics2["aware_warmup"] == 0.0


def test_without_explore_the_projection_starts_at_the_first_round():
    generator = torch.Generator().manual_seed(2)
    g1 = torch.randn(3, 9, dtype=F64, generator=generator)
    ctx = context(4, 9)
    method = server("fedavg", aware=True, aware_alpha=0.5, learning_rate=0.8)
    x0 = torch.zeros(9, dtype=F64)
    x1, _, metrics = method.step(method.init(x0, ctx), x0, cohort([0, 1, 3], g1, [10, 20, 30]), ctx)
    u1 = 0.8 * (torch.tensor([1, 2, 3], dtype=F64) / 6) @ g1
    d1 = fedaware_direction(0.5 * g1)
    assert torch.allclose(x1, -(u1 @ d1) / (d1 @ d1) * d1, atol=1e-10)
    assert "aware_warmup" not in metrics
