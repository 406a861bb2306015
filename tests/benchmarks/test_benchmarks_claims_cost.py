"""The claims cost model's counting (benchmarks/flop_count.py, benchmarks/claims_plans.py) against hand
computations, torch's own FLOP counter, every registered solver's counted gradient calls and the
simulator's own rounds. Nothing is timed."""
import collections

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

import fedhet.components  # noqa: F401  (registers every solver)
from benchmark_loader import load_benchmark
from fedhet.backends.base import RoundWork
from fedhet.backends.sequential import SequentialBackend
from fedhet.config.schema import load_config
from fedhet.core.registry import CLIENT_SOLVERS
from fedhet.engine.assembly import simulator_from_config
from fedhet.engine.federation import build_federation
from fedhet.lab.sweep.schedule import TWO_GRADIENT_SOLVERS

flop_count = load_benchmark("flop_count")
claims_plans = load_benchmark("claims_plans")

# A tiny MLP 3 -> 4 -> 2: per example, forward 2 * (3 * 4 + 4 * 2) = 40 FLOPs.
TINY = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
# Synthetic(1,1): 10 devices of unequal sizes; Hybrid+ gives every client its own epochs and batch.
SMALL = ["data.name=synthetic", "data.num_devices=10", "data.max_device_size=90", "partition.name=natural",
         "partition.num_clients=10", "participation.clients_per_round=4", "model.name=mlp", "model.hidden=[8]",
         "run.progress=false", "run.rounds=5", "run.eval_every=2"]


def test_a_tiny_mlp_by_hand():
    layers = flop_count.linear_layers(TINY)
    assert [(layer.fan_in, layer.fan_out, layer.first) for layer in layers] == [(3, 4, True), (4, 2, False)]
    assert flop_count.forward_flops(layers, 5) == 5 * 40
    # 5 rows: layer 1 forward + weight gradient 2 * (2 * 5 * 12) = 240 (no input gradient: it reads the data);
    # layer 2 forward + weight gradient + input gradient 3 * (2 * 5 * 8) = 240.
    assert flop_count.gradient_flops(layers, 5) == 480
    assert sum(2 * m * k * n for m, k, n in flop_count.step_products(layers, 5)) == 480


@pytest.mark.parametrize("widths", [(3, 4, 2), (784, 200, 200, 10), (7, 2)])
def test_a_training_pass_matches_torch_s_flop_counter(widths):
    """torch counts the products autograd really runs: the first layer's input gradient is not one of them."""
    model = nn.Sequential(*[module for a, b in zip(widths[:-1], widths[1:]) for module in (nn.Linear(a, b), nn.ReLU())][:-1])
    x, y = torch.randn(6, widths[0]), torch.randint(0, widths[-1], (6,))
    with FlopCounterMode(display=False) as counter:
        nn.functional.cross_entropy(model(x), y).backward()
    layers = flop_count.linear_layers(model)
    assert counter.get_total_flops() == flop_count.gradient_flops(layers, 6)
    assert counter.get_total_flops() < 3 * flop_count.forward_flops(layers, 6)


def test_fedspeed_counts_two_gradients_a_step():
    layers = flop_count.linear_layers(TINY)
    assert flop_count.gradients_per_step("fedspeed") == 2
    assert flop_count.plan_flops(layers, [5, 5], flop_count.gradients_per_step("fedspeed")) == 2 * 2 * 480
    work = claims_plans.Work(layers=layers, train=collections.Counter({5: 2}))
    assert work.scaled(2).train_flops() == 2 * work.train_flops() == 4 * 480
    with pytest.raises(KeyError, match="add it to GRADIENTS_PER_STEP"):
        flop_count.gradients_per_step("no-such-solver")


def test_a_plan_with_unequal_steps_counts_its_partial_batches():
    # 10 examples in batches of 4, two epochs: 4, 4, 2 each epoch.
    assert claims_plans.step_rows(10, 4, 2, 6) == [4, 4, 2, 4, 4, 2]
    assert claims_plans.step_rows(10, 4, 0, 3) == [4, 4, 4]          # fixed steps: full batches
    layers = flop_count.linear_layers(TINY)
    per_row = 480 // 5
    assert flop_count.plan_flops(layers, claims_plans.step_rows(10, 4, 2, 6), 1) == 20 * per_row
    assert claims_plans.eval_rows(10, 4) == [4, 4, 2]


@pytest.mark.parametrize("solver", sorted(CLIENT_SOLVERS.names()))
def test_the_gradient_table_matches_every_registered_solver(solver):
    """Each registered solver's grad_fn calls per step, counted in a round of the sequential backend."""
    config = load_config(None, [*SMALL, "client.steps=3", "client.batch_size=8", "run.dtype=float64"])
    task = build_federation(config, torch.device("cpu")).task
    entry = CLIENT_SOLVERS.get(solver)
    made = entry.factory(entry.options_cls(steps=3, batch_size=8))
    calls = []
    step = made.step

    def counted_step(w, x, grad_fn, learning_rate, local):
        def counting(point):
            calls.append(1)
            return grad_fn(point)
        return step(w, x, counting, learning_rate, local)

    made.step = counted_step
    x = task.spec.flatten(task.model, dtype=task.dtype).clone()
    stage = made.server_stage()
    broadcast = stage.broadcast(stage.init(x, None)) if stage is not None else {}
    ids = torch.tensor([1, 4])
    states = {name: torch.zeros(2, task.spec.dim, dtype=task.dtype) for name in made.client_state_names}
    # fused_step=False: the fused MLP step computes the same one gradient a step without calling
    # solver.step, so only the plain step can count its gradient calls.
    SequentialBackend(fused_step=False).train_cohort(task, made, RoundWork(round_index=0, seed=3, params=x, client_ids=ids,
                                                           client_states=states, broadcast=broadcast,
                                                           learning_rate=0.01))
    assert len(calls) == 2 * 3 * flop_count.gradients_per_step(solver)
    # The sweep's longest-first estimate prices the same solvers at two gradients a step.
    assert (solver in TWO_GRADIENT_SOLVERS) == (flop_count.gradients_per_step(solver) == 2)


def simulated(config):
    """``(work drawn, federation, simulator after its rounds, participations, local steps)``."""
    federation = build_federation(config, torch.device("cpu"))
    work = claims_plans.draw_work(config, federation)
    simulator = simulator_from_config(config, federation)
    participations = steps = 0
    for _ in range(config.run.rounds):
        _, cohort = simulator.run_round()
        participations += len(cohort.client_ids)
        steps += int(cohort.local_steps.sum())
    return work, federation, simulator, participations, steps


def test_the_drawn_work_is_the_simulator_s_own_rounds():
    """Participants and per-client steps of every round, drawn without training, equal what the
    simulator trains (Hybrid+: unequal epochs and batches per client and round)."""
    config = load_config(None, [*SMALL, "client.system=hybrid_plus", "participation.name=uniform"])
    work, federation, _, participations, steps = simulated(config)
    assert (work.participations, work.steps, work.rounds) == (participations, steps, 5)
    assert sum(work.train.values()) == steps
    assert len(work.train) > 3                          # batches of many sizes
    # Rounds 2, 4 and 5 (the last) evaluate the test set once each.
    assert work.evaluations == 3
    assert sum(rows * count for rows, count in work.evaluate.items()) == 3 * len(federation.task.test)


def test_epochs_pass_every_participant_s_examples_that_many_times():
    """Two epochs of batch 16 (client sizes 61..90: partial last batches): the rows of all passes are
    2 n_i per participation, from the simulator's own participation log."""
    config = load_config(None, [*SMALL, "client.epochs=2", "client.batch_size=16"])
    work, federation, simulator, _, steps = simulated(config)
    sizes = federation.task.client_sizes
    rows = sum(r * count for r, count in work.train.items())
    assert rows == 2 * int((simulator.participation_log.sum(0) * sizes).sum())
    assert work.steps == steps and max(work.train) == 16 and min(work.train) < 16


def test_a_model_with_other_layers_is_refused():
    with pytest.raises(ValueError, match="linear layers only"):
        flop_count.linear_layers(nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(8, 2)))


def test_the_replaced_rule_is_three_forwards_of_one_gradient():
    layers = flop_count.linear_layers(TINY)
    work = claims_plans.Work(layers=layers, train=collections.Counter({5: 1, 3: 2})).scaled(2)
    assert work.three_forwards_flops() == 3 * 40 * (5 + 2 * 3)
    assert work.train_flops() == 2 * (480 + 2 * 480 * 3 // 5)
