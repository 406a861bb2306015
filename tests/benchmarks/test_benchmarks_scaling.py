"""benchmarks/scaling.py's counting (not its timings): bytes per round against a hand computation, the
stores it finds against the methods' own declarations, the FLOP count of a linear model against its
closed form, the sweep it reads from a preset's header. Nothing is timed."""
import tempfile
from pathlib import Path

import pytest
import torch

from benchmark_loader import load_benchmark


@pytest.fixture(scope="module")
def scaling():
    return load_benchmark("scaling")


def test_round_bytes_by_hand(scaling):
    # d = 1000 float32, K = 10 clients, one client store, one broadcast vector, 4 nodes.
    got = scaling.round_bytes(1000, 10, 1, 4, broadcast=1)
    assert got["sequential"] == got["vectorized"] == 0
    per_client = (1 + 2 * 1) * 10 * 1000 * 4          # delta + store row out and back, 10 clients
    assert got["processes"] == 2 * 1000 * 4 + per_client
    assert got["ray"] == 4 * 2 * 1000 * 4 + per_client   # x and c fetched once by each of the 4 nodes
    assert scaling.round_bytes(1000, 2, 0, 4)["ray"] == 2 * 1000 * 4 + 2 * 1000 * 4   # min(K, nodes) = 2


def test_store_counts_match_the_methods_declarations(scaling):
    from fedhet.config.schema import load_config

    work = Path(tempfile.mkdtemp(prefix="fedhet-test-scaling-"))
    scaffold = scaling.store_counts(load_config(None, scaling.synthetic(12, 4, ["algorithm=scaffold"])), work / "a")
    assert scaffold["client"] == ["control_variate"] and scaffold["server"] == [] and scaffold["broadcast_vectors"] == 1
    fedavg = scaling.store_counts(load_config(None, scaling.synthetic(12, 4, ["algorithm=fedavg"])), work / "b")
    assert fedavg["count"] == 0 and fedavg["broadcast_vectors"] == 0
    # server.aware adds FedAWARE's momenta to any server (created at the first round).
    aware = scaling.store_counts(load_config(None, scaling.synthetic(12, 4, ["server.aware=true"])), work / "c")
    assert aware["server"] == ["aware_momentum"]


def test_flops_of_a_linear_model_are_its_closed_form(scaling):
    model = torch.nn.Linear(60, 10)
    # Forward 2 * 60 * 10 per example; backward: the weight gradient (2 * 60 * 10; the input needs none).
    assert scaling.forward_flops_per_example(model, (60,), 8) == 2 * 600
    assert scaling.training_flops_per_example(model, (60,), 8, 10) == 2 * 600 + 2 * 600


def test_preset_sweep_is_read_from_its_header(scaling):
    plan, args = scaling.plan_preset(scaling.ROOT / "configs" / "papers" / "fedaware_t2_cifar100.toml")
    assert args[:1] == ["configs/papers/fedaware_t2_cifar100.toml"] and "--seeds" in args
    variants = (scaling.ROOT / "configs" / "papers" / "fedaware_t2.variants.toml").read_text().count("\n[")
    assert len(plan.runs) == variants * 3 and not plan.skipped
    assert scaling.expected_cohort(plan.runs[0].config) == 10


def test_power_law_prediction(scaling):
    # An [N, N] float64 state: 8 N^2 bytes.
    history = [(100, 8 * 100 ** 2), (1000, 8 * 1000 ** 2)]
    assert scaling.predicted_bytes(history, 100_000) == pytest.approx(8 * 100_000 ** 2)
    assert scaling.predicted_bytes([(1000, 0), (10_000, 0)], 100_000) == 0
