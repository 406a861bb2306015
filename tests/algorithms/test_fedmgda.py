"""FedMGDA+ (algorithms/fedmgda.py): the box-constrained simplex solver against exact enumeration, and the
server step against direct formulas."""
import itertools
import math

import pytest
import torch

import fedhet.components  # noqa: F401  (registers the servers)
from fedhet.algorithms.fedmgda import box_simplex_min_norm
from fedhet.core.cohort import Cohort
from fedhet.core.options import ConfigError, build_options
from fedhet.core.registry import SERVERS
from fedhet.core.store import ClientStore
from fedhet.server.base import ServerContext
from fedhet.server.min_norm import min_norm_weights

F64 = torch.float64


def exact_box_simplex(gram, center, epsilon):
    """min w^T Q w over {sum w = 1, lo <= w <= hi}, lo/hi = clip(center -/+ epsilon, 0, 1): every
    coordinate is at its lower bound, its upper bound, or free; for each assignment solve the KKT
    system of the free coordinates and keep the best feasible point."""
    n = gram.shape[0]
    lo = (center - epsilon).clamp_min(0.0)
    hi = (center + epsilon).clamp_max(1.0)
    best, best_value = None, math.inf
    for pattern in itertools.product("lhf", repeat=n):
        w = torch.zeros(n, dtype=F64)
        free = [i for i, s in enumerate(pattern) if s == "f"]
        for i, s in enumerate(pattern):
            if s == "l":
                w[i] = lo[i]
            elif s == "h":
                w[i] = hi[i]
        mass = 1.0 - float(w.sum())
        if free:
            idx = torch.tensor(free)
            fixed = torch.tensor([i for i in range(n) if i not in free], dtype=torch.int64)
            k = len(free)
            kkt = torch.zeros(k + 1, k + 1, dtype=F64)
            kkt[:k, :k] = gram[idx][:, idx]
            kkt[:k, k] = -1.0
            kkt[k, :k] = 1.0
            rhs = torch.zeros(k + 1, dtype=F64)
            rhs[:k] = -(gram[idx][:, fixed] @ w[fixed]) if fixed.numel() else 0.0
            rhs[k] = mass
            solution = torch.linalg.lstsq(kkt, rhs.unsqueeze(1), driver="gelsd").solution[:, 0]
            if float((kkt @ solution - rhs).abs().max()) > 1e-9:
                continue
            w[idx] = solution[:k]
        elif abs(mass) > 1e-12:
            continue
        if bool((w < lo - 1e-12).any()) or bool((w > hi + 1e-12).any()):
            continue
        value = float(w @ gram @ w)
        if value < best_value:
            best, best_value = w, value
    return best, best_value


def random_gram(generator, n, rank):
    vectors = torch.randn(n, rank, dtype=F64, generator=generator)
    return vectors @ vectors.T


@pytest.mark.parametrize("epsilon", [0.0, 0.02, 0.1, 0.3, 0.6, 0.99])
def test_box_simplex_solver_matches_exact_enumeration(epsilon):
    generator = torch.Generator().manual_seed(int(epsilon * 1000))
    for trial in range(12):
        n = 2 + trial % 4
        gram = random_gram(generator, n, rank=1 + trial % n)          # includes rank-deficient ones
        center = torch.rand(n, dtype=F64, generator=generator) + 0.05
        center = center / center.sum()
        weights, info = box_simplex_min_norm(gram, center, epsilon, tol=1e-10)
        _, best = exact_box_simplex(gram, center, epsilon)
        value = float(weights @ gram @ weights)
        assert value <= best * (1 + 1e-6) + 1e-12, (trial, value, best)
        assert math.isclose(float(weights.sum()), 1.0, abs_tol=1e-12)
        assert bool(((weights - center).abs() <= epsilon + 1e-12).all()) and bool((weights >= 0).all())
        assert info["converged"] and info["iterations"] < 10000


def test_epsilon_one_is_the_plain_simplex_min_norm():
    generator = torch.Generator().manual_seed(1)
    gram = random_gram(generator, 6, 4)
    center = torch.full((6,), 1 / 6, dtype=F64)
    weights, _ = box_simplex_min_norm(gram, center, 1.0)
    reference, _ = min_norm_weights(gram)
    assert torch.allclose(weights, reference)
    # The box solver itself (epsilon just below 1 leaves the box inactive here) agrees too.
    boxed, _ = box_simplex_min_norm(gram, center, 1.0 - 1e-12, tol=1e-12)
    assert math.isclose(float(boxed @ gram @ boxed), float(reference @ gram @ reference), rel_tol=1e-6)


def test_invalid_inputs_are_rejected():
    with pytest.raises(ValueError, match="center"):
        box_simplex_min_norm(torch.eye(2, dtype=F64), torch.tensor([0.7, 0.7], dtype=F64), 0.1)
    with pytest.raises(ValueError, match="epsilon"):
        box_simplex_min_norm(torch.eye(2, dtype=F64), torch.tensor([0.5, 0.5], dtype=F64), -0.1)


# --- the server method -------------------------------------------------------------------------------

def context(num_clients, dim):
    def make_store(name, subset=None):
        return ClientStore(name, num_clients, dim, subset=subset, compute_dtype=F64)
    return ServerContext(round_index=0, num_clients=num_clients, make_store=make_store)


def step(updates, sizes, **values):
    entry = SERVERS.get("fedmgda_plus")
    method = entry.factory(build_options(entry.options_cls, values, section="server"))
    count = len(sizes)
    c = Cohort(torch.arange(count), -updates, torch.tensor(sizes), torch.full((count,), 3), torch.zeros(count, dtype=F64))
    ctx = context(count + 2, updates.shape[1])
    x0 = torch.zeros(updates.shape[1], dtype=F64)
    x, _, metrics = method.step(method.init(x0, ctx), x0, c, ctx)
    return -x, metrics


UPDATES = torch.tensor([[3.0, 0.0, 1.0, 0.0, 2.0], [0.0, 0.5, 0.0, 1.0, 0.0],
                        [1.0, 1.0, -1.0, 0.0, 0.5], [-0.5, 2.0, 0.0, 0.0, 1.0]], dtype=F64)
SIZES = [10, 20, 30, 40]


def test_epsilon_one_steps_along_the_min_norm_point_of_the_normalised_updates():
    unit = UPDATES / UPDATES.norm(dim=1, keepdim=True)
    center = torch.tensor(SIZES, dtype=F64) / 100
    weights, _ = exact_box_simplex(unit @ unit.T, center, 1.0)
    d, metrics = step(UPDATES, SIZES, epsilon=1.0, learning_rate=0.5)
    assert torch.allclose(d, 0.5 * weights @ unit, atol=1e-8)
    assert metrics["mgda_num_nonzero"] == int((weights > 1e-9).sum())


@pytest.mark.parametrize("epsilon", [0.0, 1e-9])
def test_tiny_epsilon_is_the_data_weighted_average_of_normalised_updates(epsilon):
    unit = UPDATES / UPDATES.norm(dim=1, keepdim=True)
    d, _ = step(UPDATES, SIZES, epsilon=epsilon)
    assert torch.allclose(d, torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=F64) @ unit, atol=1e-8)


def test_intermediate_epsilon_matches_exact_enumeration():
    unit = UPDATES / UPDATES.norm(dim=1, keepdim=True)
    center = torch.tensor(SIZES, dtype=F64) / 100
    weights, _ = exact_box_simplex(unit @ unit.T, center, 0.15)
    d, _ = step(UPDATES, SIZES, epsilon=0.15)
    assert torch.allclose(d, weights @ unit, atol=1e-7)


def test_a_zero_update_means_no_common_descent_direction():
    updates = UPDATES.clone()
    updates[2] = 0.0
    d, _ = step(updates, SIZES, epsilon=1.0)
    # Zero up to the solver's stopping floor (||d||^2 <= 8 N eps_64 max_i ||ghat_i||^2).
    assert float(d.norm()) < 1e-7
    assert float(step(UPDATES, SIZES, epsilon=1.0)[0].norm()) > 0.1


def test_negative_epsilon_is_a_config_error():
    with pytest.raises(ConfigError, match="server.epsilon"):
        build_options(SERVERS.get("fedmgda_plus").options_cls, {"epsilon": -0.1}, section="server")


def test_float32_updates_with_uneven_sizes_are_handled():
    # float32 data weights like 7/49 do not sum to exactly 1; the server works in float64 weights.
    d32, _ = step(UPDATES[:3].float().double(), [7, 13, 29], epsilon=0.05)
    entry = SERVERS.get("fedmgda_plus")
    method = entry.factory(build_options(entry.options_cls, {"epsilon": 0.05}, section="server"))
    c = Cohort(torch.arange(3), -UPDATES[:3].float(), torch.tensor([7, 13, 29]), torch.full((3,), 3), torch.zeros(3))
    ctx = context(5, 5)
    x, _, _ = method.step(method.init(torch.zeros(5), ctx), torch.zeros(5), c, ctx)
    assert torch.allclose(-x.double(), d32, atol=1e-5)
