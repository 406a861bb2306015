"""The longest-first order of a sweep's parallel runs (fedhet.lab.sweep.schedule)."""
from __future__ import annotations

import io

import pytest

from fedhet.config import load_config
from fedhet.lab.sweep.execute import run_sweep
from fedhet.lab.sweep.grid import parse_grid
from fedhet.lab.sweep.plan import plan_sweep
from fedhet.lab.sweep.progress import DONE
from fedhet.lab.sweep.schedule import REFERENCE_EXAMPLES, estimated_cost, expected_clients_per_round, longest_first

FMNIST = ["data.name=fmnist", "model.name=mlp", "partition.name=dirichlet", "partition.num_clients=100",
          "run.rounds=10", "run.eval_every=5", "client.batch_size=16"]


def config(*sets):
    return load_config(None, [*FMNIST, *sets])


@pytest.mark.parametrize("sets, expected", [
    (["participation.name=full"], 100),
    (["participation.name=uniform", "participation.clients_per_round=10"], 10),
    (["participation.name=bernoulli", "participation.ratio=0.2"], 20),
    (["participation.name=heterogeneous", "participation.mean=0.1"], 10),
])
def test_expected_clients_per_round_of_each_process(sets, expected):
    assert expected_clients_per_round(config(*sets)) == pytest.approx(expected)


def test_the_cost_by_hand():
    uniform = ["participation.name=uniform", "participation.clients_per_round=10"]
    # 10 rounds x 10 clients x 5 steps x 16 examples, plus 2 evaluations of 60000/18 example-equivalents.
    assert estimated_cost(config(*uniform, "client.steps=5")) == 10 * 10 * 5 * 16 + 2 * REFERENCE_EXAMPLES / 18
    # Epochs: 2 passes over an equal share of 60000 examples among 100 clients.
    assert estimated_cost(config(*uniform, "client.epochs=2")) == 10 * 10 * 2 * 600 + 2 * REFERENCE_EXAMPLES / 18
    # FedSpeed takes two gradients a step; a resumed run is priced by the rounds it has left (4 of 10: 1 evaluation).
    assert estimated_cost(config(*uniform, "client.steps=5", "algorithm=fedspeed")) == 2 * 10 * 10 * 5 * 16 + 2 * 60000 / 18
    assert estimated_cost(config(*uniform, "client.steps=5"), rounds_done=6) == 4 * 10 * 5 * 16 + 1 * REFERENCE_EXAMPLES / 18


def test_a_natural_partition_counts_the_data_set_s_devices():
    # Synthetic(1,1) with a natural partition: one client per device, no partition.num_clients.
    natural = load_config(None, ["data.name=synthetic", "data.num_devices=30", "partition.name=natural",
                                 "participation.name=full", "run.rounds=2", "run.eval_every=1", "client.steps=3",
                                 "client.batch_size=10"])
    assert natural.partition.options.num_clients is None
    assert expected_clients_per_round(natural) == 30
    assert estimated_cost(natural) == 2 * 30 * 3 * 10 + 2 * REFERENCE_EXAMPLES / 18


def test_longest_first_keeps_the_order_of_ties():
    assert longest_first(["a", "b", "c", "d"], [1.0, 3.0, 1.0, 3.0]) == ["b", "d", "a", "c"]
    with pytest.raises(ValueError, match="3 items but 2 costs"):
        longest_first(["a", "b", "c"], [1.0, 2.0])


def test_parallel_workers_start_the_longest_runs_first(tiny_config, tmp_path):
    plan = plan_sweep(tiny_config, grids=[parse_grid("run.rounds=2,6,4")], out_dir=tmp_path / "out")
    stream = io.StringIO()
    result = run_sweep(plan, jobs=2, stream=stream, live=False, poll_seconds=0.1)
    assert [o.status for o in result.outcomes] == [DONE, DONE, DONE]
    started = [line.split()[2] for line in stream.getvalue().splitlines() if " running " in line]
    assert started[:2] == ["tiny__run.rounds=6__seed=1", "tiny__run.rounds=4__seed=1"], stream.getvalue()
