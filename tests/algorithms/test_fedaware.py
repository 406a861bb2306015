"""FedAWARE (algorithms/fedaware.py, server/aware_direction.py) against independent truths: hand-built momenta, an exact min-norm
solver by active-set enumeration, full Gram recomputation, and an uninterrupted run."""
import io
import itertools
import math

import pytest
import torch

import fedhet.components  # noqa: F401  (registers the servers)
from fedhet.client.base import ClientOptions
from fedhet.core.cohort import Cohort
from fedhet.core.options import ConfigError, build_options
from fedhet.core.registry import CLIENT_SOLVERS, SERVERS
from fedhet.core.store import ClientStore, StoreOptions
from fedhet.engine import checkpoint as ckpt
from fedhet.participation.uniform import UniformOptions, UniformParticipation
from fedhet.problems.least_squares import full_batch_options, make_least_squares
from fedhet.server.aware_direction import reference_gram
from fedhet.server.base import ServerContext

F64 = torch.float64


# --- independent truths ------------------------------------------------------------------------------

def exact_min_norm(gram):
    """argmin w^T Q w over the simplex by enumerating supports and solving each face's KKT system."""
    q = gram.to(F64)
    n = q.shape[0]
    best, best_value = None, math.inf
    for size in range(1, n + 1):
        for support in itertools.combinations(range(n), size):
            idx = torch.tensor(support)
            kkt = torch.zeros(size + 1, size + 1, dtype=F64)
            kkt[:size, :size] = q[idx][:, idx]
            kkt[:size, size] = -1.0
            kkt[size, :size] = 1.0
            rhs = torch.zeros(size + 1, dtype=F64)
            rhs[size] = 1.0
            solution = torch.linalg.lstsq(kkt, rhs.unsqueeze(1), driver="gelsd").solution[:, 0]
            if float((kkt @ solution - rhs).abs().max()) > 1e-9:
                continue
            w = torch.zeros(n, dtype=F64)
            w[idx] = solution[:size]
            if float(w.min()) < -1e-12:
                continue
            w = w.clamp_min(0)
            w = w / w.sum()
            value = float(w @ q @ w)
            if value < best_value - 1e-15:
                best, best_value = w, value
    return best


def expected_direction(momenta, *, normalize=True, uniform=False):
    """d from a [k, d] stack of momenta (rows of the clients in the simplex), by the papers' formulas."""
    m = momenta.to(F64)
    norms = m.norm(dim=1)
    basis = m / norms[:, None] if normalize else m
    weights = (torch.full((len(m),), 1.0 / len(m), dtype=F64) if uniform else exact_min_norm(basis @ basis.T))
    return weights @ basis, weights


# --- helpers -----------------------------------------------------------------------------------------

LAYERS = {"body": (0, 4), "head": (4, 6)}   # a 6-coordinate "model" with two named parameters


def context(num_clients, dim, *, dtype=F64, store=StoreOptions(), round_index=0):
    def make_store(name, subset=None):
        return ClientStore(name, num_clients, dim, options=store, subset=subset, compute_dtype=dtype)

    def slices(names):
        return torch.cat([torch.arange(*LAYERS[n]) for n in names])

    return ServerContext(round_index=round_index, num_clients=num_clients, make_store=make_store,
                         param_names=tuple(LAYERS) if dim == 6 else (),
                         param_slices=slices if dim == 6 else None)


def cohort(ids, updates, sizes=None):
    """A cohort whose pseudo-gradients are ``updates`` (rows for ``ids``)."""
    ids = torch.tensor(ids, dtype=torch.int64)
    updates = torch.as_tensor(updates)
    count = len(ids)
    num_examples = torch.tensor(sizes if sizes is not None else [10] * count, dtype=torch.int64)
    return Cohort(ids, -updates, num_examples, torch.full((count,), 5, dtype=torch.int64),
                  torch.zeros(count, dtype=updates.dtype))


def fedaware(**values):
    entry = SERVERS.get("fedaware")
    return entry.factory(build_options(entry.options_cls, values, section="server"))


def run_rounds(server, ctx, rounds, params):
    state = server.init(params, ctx)
    metrics = []
    for c in rounds:
        params, state, m = server.step(state, params, c, ctx)
        metrics.append(m)
    return params, state, metrics


# --- the update rule ---------------------------------------------------------------------------------

def test_float32_momenta_are_bitwise_the_out_of_place_formula():
    # The server updates the momenta in place to save [K, d] temporaries; the roundings must stay
    # those of (1 - alpha) * m + alpha * g written out.
    alpha, generator = 0.3, torch.Generator().manual_seed(3)
    updates = [torch.randn(2, 64, generator=generator) for _ in range(3)]
    ids = [[0, 1], [1, 2], [0, 1]]
    ctx = context(3, 64, dtype=torch.float32, store=StoreOptions(dtype="float32"))
    _, state, _ = run_rounds(fedaware(alpha=alpha), ctx, [cohort(i, g) for i, g in zip(ids, updates)],
                             torch.zeros(64))
    expected = torch.zeros(3, 64)
    for client_ids, g in zip(ids, updates):
        expected[client_ids] = (1 - alpha) * expected[client_ids] + alpha * g
    assert torch.equal(state.aggregator.momenta.read_all(), expected)


@pytest.mark.parametrize("normalize", [True, False])
def test_two_rounds_match_the_papers_formulas(normalize):
    alpha, eta = 0.3, 0.7
    g = torch.tensor([[2.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0, 0.5], [-1.0, 0.5, 0.0, 2.0],
                      [1.0, 1.0, -1.0, 0.0], [0.3, -2.0, 0.0, 1.0]], dtype=F64)
    rounds = [cohort([0, 1], g[[0, 1]]), cohort([1, 2], g[[3, 4]])]
    x0 = torch.tensor([1.0, -1.0, 0.5, 2.0], dtype=F64)
    server = fedaware(alpha=alpha, learning_rate=eta, normalize=normalize)
    x, state, metrics = run_rounds(server, context(3, 4), rounds, x0)

    # Eq. (3), AISTATS form, from m = 0; round 1 then round 2.
    m = torch.zeros(3, 4, dtype=F64)
    m[0], m[1] = alpha * g[0], alpha * g[1]
    d1, _ = expected_direction(m[[0, 1]], normalize=normalize)
    m[1] = (1 - alpha) * m[1] + alpha * g[3]
    m[2] = alpha * g[4]
    d2, weights = expected_direction(m, normalize=normalize)
    assert torch.allclose(state.aggregator.momenta.read_all(), m, atol=1e-15)
    assert torch.allclose(x, x0 - eta * d1 - eta * d2, atol=1e-9)
    assert math.isclose(metrics[-1]["pseudo_grad_norm"], float(d2.norm()), rel_tol=1e-7)
    positive = weights[weights > 1e-12]
    assert math.isclose(metrics[-1]["aware_weight_entropy"], float(-(positive * positive.log()).sum()), abs_tol=1e-6)
    assert metrics[-1]["aware_num_nonzero"] == len(positive)
    assert metrics[-1]["aware_num_seen"] == 3
    assert metrics[-1]["solver_iterations"] >= 0 and metrics[-1]["solver_gap"] >= 0


def test_normalized_step_is_at_most_eta_and_raw_step_is_the_min_norm_point():
    g = torch.randn(4, 12, dtype=F64, generator=torch.Generator().manual_seed(0)) * torch.tensor([[1.0], [5.0], [0.2], [3.0]], dtype=F64)
    c = cohort([0, 1, 2, 3], g)
    x0 = torch.zeros(12, dtype=F64)
    x_norm, _, _ = run_rounds(fedaware(alpha=1.0), context(4, 12), [c], x0)
    x_raw, _, _ = run_rounds(fedaware(alpha=1.0, normalize=False), context(4, 12), [c], x0)
    # Normalised: a convex combination of unit vectors. Raw: Eq. (2) exactly, much shorter here.
    assert float(x_norm.norm()) <= 1.0 + 1e-12
    d_raw, _ = expected_direction(g, normalize=False)
    assert torch.allclose(-x_raw, d_raw, atol=1e-10)
    d_norm, _ = expected_direction(g, normalize=True)
    assert torch.allclose(-x_norm, d_norm, atol=1e-10)
    assert not torch.allclose(x_norm / x_norm.norm(), x_raw / x_raw.norm(), atol=1e-3)


def test_unit_vectors_get_uniform_weights():
    # mhat_i = e_i: the min-norm point of the simplex's vertices is its centre.
    c = cohort([0, 1, 2], torch.eye(3, dtype=F64) * torch.tensor([[3.0], [0.5], [2.0]], dtype=F64))
    x, state, metrics = run_rounds(fedaware(), context(3, 3), [c], torch.zeros(3, dtype=F64))
    assert torch.allclose(x, torch.full((3,), -1.0 / 3, dtype=F64), atol=1e-12)
    assert math.isclose(metrics[0]["aware_weight_entropy"], math.log(3), rel_tol=1e-9)


def test_never_seen_clients_are_left_out_of_the_simplex():
    # Five clients, two seen. Were the unseen (zero) momenta in the simplex, d would be 0.
    g = torch.tensor([[1.0, 2.0, 0.0], [2.0, -1.0, 1.0]], dtype=F64)
    server = fedaware(alpha=0.5)
    x, state, metrics = run_rounds(server, context(5, 3), [cohort([1, 3], g)], torch.zeros(3, dtype=F64))
    expected, _ = expected_direction(0.5 * g)
    assert float(expected.norm()) > 0.1
    assert torch.allclose(-x, expected, atol=1e-12)
    weights = server.aggregator.direction.weights(state.aggregator)
    assert weights[[0, 2, 4]].tolist() == [0.0, 0.0, 0.0]
    assert metrics[0]["aware_num_seen"] == 2


def test_no_step_before_any_client_is_seen_and_empty_rounds_step_along_the_stored_momenta():
    server = fedaware()
    ctx = context(3, 2)
    empty = Cohort.empty(2, F64, "cpu")
    x0 = torch.tensor([1.0, 1.0], dtype=F64)
    x, state, metrics = run_rounds(server, ctx, [empty], x0)
    assert torch.equal(x, x0) and metrics[0]["aware_num_seen"] == 0
    # Algorithm 1 with S_t empty: momenta unchanged, x moves along the same d again.
    g = torch.tensor([[1.0, 0.0]], dtype=F64)
    x, state, _ = run_rounds(server, ctx, [cohort([2], g), empty], x0)
    assert torch.allclose(x, x0 - 2 * torch.tensor([1.0, 0.0], dtype=F64))


def test_uniform_weights_ablation_is_the_mean_of_the_seen_momenta():
    g = torch.tensor([[1.0, 0.0, 0.0, 2.0], [0.0, 3.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]], dtype=F64)
    for normalize in (True, False):
        x, _, metrics = run_rounds(fedaware(uniform_weights=True, normalize=normalize, alpha=0.5),
                                   context(6, 4), [cohort([0, 2, 5], g)], torch.zeros(4, dtype=F64))
        expected, _ = expected_direction(0.5 * g, normalize=normalize, uniform=True)
        assert torch.allclose(-x, expected, atol=1e-12)
        assert math.isclose(metrics[0]["aware_weight_entropy"], math.log(3), rel_tol=1e-12)
        assert metrics[0]["solver_iterations"] == 0


def test_incremental_gram_equals_full_recomputation_and_leaves_other_entries_untouched():
    generator = torch.Generator().manual_seed(3)
    num_clients, dim = 9, 40
    server = fedaware(alpha=0.4)
    ctx = context(num_clients, dim)
    params = torch.zeros(dim, dtype=F64)
    state = server.init(params, ctx)
    for _ in range(12):
        ids = torch.sort(torch.randperm(num_clients, generator=generator)[:3]).values
        before = state.aggregator.gram.clone()
        c = cohort(ids.tolist(), torch.randn(3, dim, dtype=F64, generator=generator))
        params, state, _ = server.step(state, params, c, ctx)
        gram = state.aggregator.gram
        others = torch.tensor([i for i in range(num_clients) if i not in ids.tolist()])
        assert torch.equal(gram[others][:, others], before[others][:, others])
        full = reference_gram(state.aggregator.momenta)
        assert torch.allclose(gram, full, rtol=1e-13, atol=1e-13)
        assert torch.equal(gram, gram.T)


def test_each_client_gets_its_own_update_whatever_the_order_of_the_cohort():
    # The released code paired sorted client ids with unsorted updates; here row k is client ids[k].
    g = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0]], dtype=F64)
    server = fedaware(alpha=0.5)
    _, state, _ = run_rounds(server, context(5, 2), [cohort([4, 0, 2], g)], torch.zeros(2, dtype=F64))
    momenta = state.aggregator.momenta
    assert torch.equal(momenta.read(torch.tensor([0, 2, 4])), 0.5 * g[[1, 2, 0]])
    assert momenta.written.tolist() == [True, False, True, False, True]


def test_cohort_listing_a_client_twice_is_rejected():
    server = fedaware()
    ctx = context(3, 2)
    state = server.init(torch.zeros(2, dtype=F64), ctx)
    with pytest.raises(ValueError, match="twice"):
        server.step(state, torch.zeros(2, dtype=F64), cohort([1, 1], torch.ones(2, 2, dtype=F64)), ctx)


@pytest.mark.parametrize("key,value", [("alpha", 0.0), ("alpha", 1.5), ("solver_tol", -1.0),
                                       ("solver_max_iter", 0), ("normalize", "yes")])
def test_bad_options_are_rejected(key, value):
    with pytest.raises(ConfigError, match=f"server.{key}"):
        build_options(SERVERS.get("fedaware").options_cls, {key: value}, section="server")


# --- storage: bfloat16 momenta and a subset of layers -------------------------------------------------

def test_bfloat16_momenta_are_self_consistent_and_close_to_float32():
    generator = torch.Generator().manual_seed(5)
    rounds = [cohort(sorted(torch.randperm(6, generator=generator)[:3].tolist()),
                     torch.randn(3, 30, generator=generator)) for _ in range(5)]
    x0 = torch.zeros(30)
    results = {}
    for dtype in ("float32", "bfloat16"):
        server = fedaware()
        ctx = context(6, 30, dtype=torch.float32, store=StoreOptions(dtype=dtype))
        x, state, _ = run_rounds(server, ctx, rounds, x0)
        store = state.aggregator.momenta
        assert store.table.dtype == getattr(torch, dtype)
        # The Gram matrix and d are those of the momenta as stored (rounded), not of unrounded ones.
        assert torch.allclose(state.aggregator.gram, reference_gram(store), rtol=1e-5, atol=1e-6)
        results[dtype] = x
    assert torch.allclose(results["bfloat16"], results["float32"], atol=3e-2)
    assert not torch.equal(results["bfloat16"], results["float32"])


def test_momentum_layers_store_a_subset_and_fedavg_fills_the_other_coordinates():
    g = torch.tensor([[1.0, 0.0, 2.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0, 0.0, 2.0],
                      [1.0, 1.0, 1.0, 1.0, -1.0, 1.0]], dtype=F64)
    sizes = [10, 30, 60]
    server = fedaware(alpha=1.0, momentum_layers=["head"])
    x, state, _ = run_rounds(server, context(4, 6), [cohort([0, 1, 3], g, sizes)], torch.zeros(6, dtype=F64))
    store = state.aggregator.momenta
    assert store.dim == 2 and store.table.shape == (4, 2)
    head, _ = expected_direction(g[:, 4:])            # lambda from the stored (head) coordinates
    p = torch.tensor(sizes, dtype=F64) / 100
    assert torch.allclose(-x[4:], head, atol=1e-12)
    assert torch.allclose(-x[:4], p @ g[:, :4], atol=1e-12)


def test_unknown_momentum_layer_is_a_config_error():
    server = fedaware(momentum_layers=["tail"])
    with pytest.raises(ConfigError, match="server.momentum_layers.*body, head"):
        server.init(torch.zeros(6, dtype=F64), context(3, 6))


# --- through the Simulator ---------------------------------------------------------------------------

def _simulator(problem, server_name, server_values, store=StoreOptions()):
    entry = SERVERS.get(server_name)
    server = entry.factory(build_options(entry.options_cls, server_values, section="server"))
    solver = CLIENT_SOLVERS.get("sgd").factory(full_batch_options(problem, ClientOptions, learning_rate=0.05, steps=3))
    return problem.simulator(solver=solver, server=server, participation=UniformParticipation(UniformOptions(clients_per_round=3)),
                             seed=4, store_options=store)


@pytest.mark.parametrize("server_name,values,store_dtype,mmap", [
    ("fedaware", {}, "float32", False),
    ("fedaware", {"momentum_layers": ["bias"]}, "bfloat16", True),
    ("fedavg", {"aware": True}, "float16", True),
])
def test_state_round_trip_through_the_simulator_is_bitwise_identical(tmp_path, server_name, values, store_dtype, mmap):
    problem = make_least_squares(num_clients=6, dim=8, examples_per_client=12, bias=True, seed=1, dtype=torch.float32)
    store = StoreOptions(dtype=store_dtype, mmap_dir=str(tmp_path / "stores") if mmap else None)
    whole = _simulator(problem, server_name, values, StoreOptions(dtype=store_dtype))
    whole.run(8)

    first = _simulator(problem, server_name, values, store)
    first.run(3)
    buffer = io.BytesIO()
    torch.save(ckpt.to_saveable(first.state_dict()), buffer)
    first.run(2)    # keeps writing the stores after the checkpoint was taken
    buffer.seek(0)
    resumed = _simulator(problem, server_name, values, store)
    resumed.load_state(torch.load(buffer, weights_only=False))
    resumed.run(5)
    assert torch.equal(resumed.params, whole.params)
    def direction_state(sim):
        return sim.server_state.aggregator if server_name == "fedaware" else sim.server_state.transforms[0]
    assert torch.equal(direction_state(resumed).gram, direction_state(whole).gram)
    assert torch.equal(direction_state(resumed).momenta.table, direction_state(whole).momenta.table)


# --- warm-up: FedAvg steps until every client is seen, with participation.explore ----------------

def _warmup_simulators(explore):
    """FedAWARE and FedAvg on the same least-squares task, 8 clients, 3 per round (sweep of 3 rounds)."""
    problem = make_least_squares(num_clients=8, dim=3, examples_per_client=[6, 8, 10, 12, 6, 8, 10, 12], seed=9)
    options = full_batch_options(problem, ClientOptions, learning_rate=0.05, steps=2)
    participation = build_options(UniformOptions, {"clients_per_round": 3, "explore": explore}, section="p")
    from fedhet.participation.warmup import with_warmup

    def simulator(server):
        return problem.simulator(solver=CLIENT_SOLVERS.get("sgd").factory(options),
                                 server=SERVERS.get(server).factory(SERVERS.get(server).options_cls()),
                                 participation=with_warmup(UniformParticipation(participation), participation),
                                 seed=4)
    return simulator("fedaware"), simulator("fedavg")


def test_with_explore_fedaware_steps_like_fedavg_until_every_client_is_seen():
    aware, fedavg = _warmup_simulators(explore=True)
    # Sweep rounds hold 3, 3, 2 clients: after rounds 0 and 1 some client is unseen (FedAvg steps);
    # round 2 completes the sweep and solves over all 8 momenta.
    for round_index in range(2):
        record, _ = aware.run_round()
        fedavg.run_round()
        assert record["aware_warmup"] == 1.0 and record["aware_num_seen"] == 3.0 * (round_index + 1)
        assert torch.equal(aware.params, fedavg.params)
    record, _ = aware.run_round()
    fedavg.run_round()
    assert record["aware_warmup"] == 0.0 and record["aware_num_seen"] == 8.0
    assert not torch.allclose(aware.params, fedavg.params, atol=1e-8)


def test_without_explore_fedaware_solves_over_the_clients_seen_from_round_zero():
    aware, fedavg = _warmup_simulators(explore=False)
    record, _ = aware.run_round()
    fedavg.run_round()
    assert "aware_warmup" not in record and record["aware_num_seen"] == 3.0
    assert not torch.allclose(aware.params, fedavg.params, atol=1e-8)
