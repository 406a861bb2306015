"""Lockstep runs (fedhet.engine.lockstep) against the same runs alone on the sequential backend, float64."""
import math

import pytest
import torch

import fedhet.components  # noqa: F401  (registers every component)
from fedhet.backends.ragged import ragged_layout
from fedhet.backends.sequential import SequentialBackend
from fedhet.client.base import LocalSolver
from fedhet.config import load_config
from fedhet.core.registry import CLIENT_SOLVERS
from fedhet.engine import build_federation, simulator_from_config
from fedhet.engine.lockstep import LockstepGroup
from fedhet.engine.simulator import TrainingDivergedError
from fedhet.testing import FEDERATION, UNIFORM, _pair_for_solver

ROUNDS = 3
MLP = ("model.name=mlp", "model.hidden=[8]")
# A knob value per solver that differs from its default, so that two runs of a group differ in it.
KNOBS = {"fedprox": "client.mu=0.3", "feddyn": "client.alpha=0.05", "fedcm": "client.alpha=0.5",
         "fedadmm": "client.rho=0.2", "fedsam": "client.rho=0.1"}


def _config(*overrides: str, solver: str = "sgd"):
    client, server = _pair_for_solver(solver)
    return load_config(None, [*FEDERATION, *UNIFORM, f"client.name={client}", f"server.name={server}", *overrides])


def _simulator(config, backend):
    return simulator_from_config(config, build_federation(config, torch.device("cpu")), backend=backend)


def _rounds(simulator, rounds=ROUNDS):
    return [simulator.run_round()[0] for _ in range(rounds)]


def _lockstep(configs, rounds=ROUNDS):
    """Each config's (records or the exception it raised, simulator), trained as one lockstep group."""
    group = LockstepGroup()
    simulators = [_simulator(config, group.member(SequentialBackend())) for config in configs]
    outcomes = group.run([lambda s=s: _rounds(s, rounds) for s in simulators])
    return list(zip(outcomes, simulators)), group


def _assert_same(alone_records, alone, records, simulator, tolerance=1e-9):
    assert len(records) == len(alone_records)
    for mine, theirs in zip(records, alone_records):
        assert mine.keys() == theirs.keys()
        for key, value in theirs.items():
            if isinstance(value, float) and math.isfinite(value):
                assert mine[key] == pytest.approx(value, rel=tolerance, abs=tolerance), key
            else:
                assert mine[key] == value, key
    assert torch.allclose(simulator.params, alone.params, rtol=0, atol=tolerance)
    for name, store in alone.client_stores.items():
        assert torch.allclose(simulator.client_stores[name].read(torch.arange(12)),
                              store.read(torch.arange(12)), rtol=0, atol=tolerance)


def _grid(count, *extra, solver="sgd"):
    rates = [0.02, 0.05, 0.1, 0.2]
    return [_config(f"client.learning_rate={rates[i % 4]}", f"run.seed={i}", *extra, solver=solver)
            for i in range(count)]


@pytest.mark.parametrize("count", [1, 3, 8])
def test_each_run_of_a_group_equals_the_run_alone(count):
    configs = _grid(count, *MLP)
    together, group = _lockstep(configs)
    assert group.stats.batches == ROUNDS and group.stats.run_rounds == ROUNDS * count
    for config, (records, simulator) in zip(configs, together):
        alone = _simulator(config, SequentialBackend())
        _assert_same(_rounds(alone), alone, records, simulator)


def test_a_run_does_not_depend_on_the_runs_that_share_its_batch():
    # The same run (index 0) in a group of two and in a group of five other runs, with larger
    # batches and more steps elsewhere (other paddings): equal to 1e-9, and to the run alone.
    mine = _config("client.learning_rate=0.07", "run.seed=5", *MLP)
    small, _ = _lockstep([mine, _config("run.seed=1", *MLP)])
    large, _ = _lockstep([mine, *_grid(4, "client.batch_size=40", "client.epochs=2", *MLP)])
    _assert_same(small[0][0], small[0][1], large[0][0], large[0][1])


@pytest.mark.parametrize("solver", sorted(CLIENT_SOLVERS.names()))
def test_every_registered_solver_with_per_row_hyperparameters(solver):
    knob = KNOBS.get(solver)
    configs = [_config("client.learning_rate=0.05", "run.seed=1", solver=solver),
               _config("client.learning_rate=0.1", "run.seed=2", *([knob] if knob else []), solver=solver)]
    together, group = _lockstep(configs)
    assert group.stats.batches == ROUNDS, "both runs share one batch a round"
    for config, (records, simulator) in zip(configs, together):
        alone = _simulator(config, SequentialBackend())
        _assert_same(_rounds(alone), alone, records, simulator)


def test_ragged_clients_hybrid_plus_batches_and_steps():
    # Hybrid+ draws E and B per client and round: unequal steps and batch sizes in every batch.
    configs = _grid(3, "client.system=hybrid_plus", *MLP)
    together, _ = _lockstep(configs)
    for config, (records, simulator) in zip(configs, together):
        alone = _simulator(config, SequentialBackend())
        _assert_same(_rounds(alone), alone, records, simulator)


DIRICHLET = ("partition.name=dirichlet", "partition.alpha=0.1", *MLP)   # client sizes 13 to 141


@pytest.mark.parametrize("work", [("client.epochs=2",), ("client.steps=5",), ("client.epochs=1",)])
def test_ragged_dirichlet_clients_train_without_padding(work):
    # Very unequal clients (Dir(0.1)) and runs of different batch sizes: at most steps the active
    # rows hold minibatches of several sizes (the partial last batch of each epoch), and rows finish
    # at different steps; every example slot computed is a real example.
    configs = [_config(f"client.learning_rate={rate}", f"run.seed={i}", f"client.batch_size={batch}", *DIRICHLET,
                       *work) for i, (rate, batch) in enumerate(((0.05, 16), (0.1, 10), (0.02, 16), (0.07, 7)))]
    together, group = _lockstep(configs)
    assert group.stats.examples > 0 and group.stats.slots == group.stats.examples
    for config, (records, simulator) in zip(configs, together):
        alone = _simulator(config, SequentialBackend())
        _assert_same(_rounds(alone), alone, records, simulator)


class MomentumNoiseSGD(LocalSolver):
    """Local SGD with a per-client momentum rebound in the local context at every step, a draw from
    the client's solver stream every step, and an upload that reads the final momentum: what the
    ragged steps must keep per row when rows finish at different steps."""

    def begin(self, x, client_state, broadcast, learning_rate, context=None):
        return {"momentum": torch.zeros_like(x), "context": context}

    def direction(self, w, x, grad_fn, local):
        loss, grad = self.gradient(w, grad_fn)
        noise = local["context"].randn(w.shape[-1], dtype=w.dtype)
        local["momentum"] = 0.5 * local["momentum"] + grad + 1e-3 * noise
        return loss, local["momentum"]

    def finish(self, x, w, local, client_state, num_steps, learning_rate):
        return w - x + 0.1 * local["momentum"], client_state, {}


def test_rows_finishing_early_keep_their_rebound_local_state_and_random_streams():
    configs = [_config(f"client.learning_rate={rate}", f"run.seed={i}", *DIRICHLET, "client.epochs=2")
               for i, rate in enumerate((0.05, 0.1, 0.02))]
    group = LockstepGroup()
    simulators = [_simulator(config, group.member(SequentialBackend())) for config in configs]
    for simulator in simulators:
        simulator.solver = MomentumNoiseSGD(simulator.solver.options)
    outcomes = group.run([lambda s=s: _rounds(s) for s in simulators])
    assert group.stats.run_rounds == ROUNDS * len(configs) and group.stats.alone_rounds == 0
    for config, records, simulator in zip(configs, outcomes, simulators):
        alone = _simulator(config, SequentialBackend())
        alone.solver = MomentumNoiseSGD(alone.solver.options)
        _assert_same(_rounds(alone), alone, records, simulator)


def test_ragged_layout_by_hand():
    # Rows in step-count order with steps of sizes [3, 3, 2], [3, 1], [2]: step 0 computes the
    # size-3 group (rows 0, 1) and row 2's 2 examples; step 1 rows 0 and 1 apart (3 and 1
    # examples); step 2 row 0 alone. Each example's step-ordered position is written by hand.
    layout = ragged_layout([[3, 3, 2], [3, 1], [2]], torch.device("cpu"))
    assert [step.active for step in layout.steps] == [3, 2, 1]
    assert [[(g.size, g.members, g.start) for g in step.groups] for step in layout.steps] == [
        [(3, (0, 1), 0), (2, (2,), 6)], [(3, (0,), 8), (1, (1,), 11)], [(2, (0,), 12)]]
    assert [step.whole for step in layout.steps] == [False, False, True]
    # Row 0's batches (examples 0-7), row 1's (8-11), row 2's (12-13), in row order.
    assert layout.slot.tolist() == [0, 1, 2, 8, 9, 10, 12, 13, 3, 4, 5, 11, 6, 7]
    assert layout.computed_slots == 14
    with_gap = ragged_layout([[2, 2], [1, 2], [2, 2]], torch.device("cpu"))
    rows = with_gap.steps[0].groups[0].rows
    assert isinstance(rows, torch.Tensor) and rows.tolist() == [0, 2]       # not consecutive: gathered


def test_runs_of_other_shapes_train_in_their_own_batches():
    configs = [_config("run.seed=1", *MLP), _config("run.seed=2"), _config("run.seed=3", *MLP)]
    together, group = _lockstep(configs)
    assert group.stats.batches == 2 * ROUNDS
    for config, (records, simulator) in zip(configs, together):
        alone = _simulator(config, SequentialBackend())
        _assert_same(_rounds(alone), alone, records, simulator)


def test_a_diverging_run_stops_alone_and_the_others_go_on():
    configs = [_config("run.seed=1", *MLP), _config("client.learning_rate=1e30", "run.seed=2", *MLP),
               _config("run.seed=3", *MLP)]
    together, _ = _lockstep(configs)
    (first, _), (diverged, _), (third, _) = together
    assert isinstance(diverged, TrainingDivergedError)
    alone = _simulator(configs[1], SequentialBackend())
    with pytest.raises(TrainingDivergedError) as expected:
        _rounds(alone)
    assert str(diverged) == str(expected.value)
    for config, records in ((configs[0], first), (configs[2], third)):
        alone = _simulator(config, SequentialBackend())
        assert isinstance(records, list) and len(records) == ROUNDS
        assert records[-1]["update_norm"] == pytest.approx(_rounds(alone)[-1]["update_norm"], rel=1e-9)


class RowUnsafeSGD(LocalSolver):
    """Plain local SGD whose class opts out of vectorisation (as a solver whose rule is not row-wise does)."""

    vectorizable = False


def test_a_run_the_vectorised_backend_refuses_trains_alone_and_says_why():
    lines = []
    group = LockstepGroup()
    refused = _config("run.seed=1", *MLP)
    simulators = [_simulator(refused, group.member(SequentialBackend(), lines.append)),
                  _simulator(_config("run.seed=2", *MLP), group.member(SequentialBackend()))]
    simulators[0].solver = RowUnsafeSGD(simulators[0].solver.options)
    outcomes = group.run([lambda s=s: _rounds(s) for s in simulators])
    assert all(isinstance(outcome, list) for outcome in outcomes)
    assert group.stats.alone_rounds == ROUNDS and group.stats.run_rounds == ROUNDS
    assert len(lines) == 1 and "trains alone" in lines[0] and "not vectorizable" in lines[0]
    alone = _simulator(refused, SequentialBackend())
    alone.solver = RowUnsafeSGD(alone.solver.options)
    _assert_same(_rounds(alone), alone, outcomes[0], simulators[0], tolerance=0)


def test_killed_lockstep_runs_resume_to_their_uninterrupted_selves(tmp_path):
    # Three runs of fedhet run's code (files, checkpoints every 2 rounds) in one group, interrupted
    # after rounds 3, 5 and 3; resumed together (from rounds 2, 4 and 2: rows of different rounds in
    # one batch), each equals the run alone on the sequential backend, and the runs that resume from
    # where the uninterrupted group was (same batches) equal it bit for bit.
    from fedhet.engine import checkpoint as ckpt
    from fedhet.engine.callbacks import read_metrics
    from fedhet.engine.runner import resume_run, run_experiment
    from small_run import StopAfter

    def config(name, i, *extra):
        return _config(f"client.learning_rate={[0.05, 0.1, 0.02][i]}", f"run.seed={i}", "run.rounds=6",
                       "run.checkpoint_every=2", f"run.out_dir={tmp_path}", f"run.name={name}", *MLP, *extra)

    def values(name):
        return [{k: v for k, v in r.items() if k != "wall_seconds"} for r in read_metrics(tmp_path / name / "metrics.jsonl")]

    def params(name):
        return ckpt.load_checkpoint(tmp_path / name)["simulator"]["params"]

    group = LockstepGroup()
    group.run([lambda i=i: run_experiment(config(f"whole{i}", i), lockstep=group) for i in range(3)])
    group = LockstepGroup()
    cut = group.run([lambda i=i: run_experiment(config(f"cut{i}", i), lockstep=group, callbacks=[StopAfter(k)])
                     for i, k in enumerate((3, 5, 3))])
    assert all(isinstance(outcome, KeyboardInterrupt) for outcome in cut)
    group = LockstepGroup()
    resumed = group.run([lambda i=i: resume_run(tmp_path / f"cut{i}", lockstep=group) for i in range(3)])
    assert [summary["rounds"] for summary in resumed] == [6, 6, 6]
    for i in range(3):
        run_experiment(config(f"alone{i}", i, "run.backend=sequential"))
        assert len(values(f"cut{i}")) == len(values(f"alone{i}")) == 6
        for mine, theirs in zip(values(f"cut{i}"), values(f"alone{i}")):
            assert mine.keys() == theirs.keys()
            for key, value in theirs.items():
                assert mine[key] == (pytest.approx(value, rel=1e-9, abs=1e-12) if isinstance(value, float) else value)
        assert torch.allclose(params(f"cut{i}"), params(f"alone{i}"), rtol=0, atol=1e-9)
    for i in (0, 2):
        assert values(f"cut{i}") == values(f"whole{i}") and torch.equal(params(f"cut{i}"), params(f"whole{i}"))


@pytest.mark.parametrize("model", [MLP, ()], ids=["mlp", "logreg-vmap"])
def test_evaluations_at_the_same_round_are_batched_and_equal_each_run_alone(tmp_path, model):
    # Four runs of fedhet run's code (one seed: Synthetic's data, and so the sets' sizes, follow the
    # seed) with their test set, validation split and global training loss; one run evaluates every
    # second round only, so at rounds 1 and 3 the others' evaluations are batched without it.
    # Every record equals the run alone on the sequential backend (1e-9, float64), and the
    # evaluations were computed together (batched products for the MLP, vmap for another model).
    from fedhet.engine.callbacks import read_metrics
    from fedhet.engine.runner import run_experiment

    def config(name, i, *backend):
        return _config(f"client.learning_rate={[0.05, 0.1, 0.02, 0.07][i]}", "run.seed=1", "run.rounds=4",
                       f"run.eval_every={2 if i == 3 else 1}", "run.global_train_loss_every=2",
                       "data.validation_fraction=0.2", f"run.out_dir={tmp_path}", f"run.name={name}", *model,
                       *backend)

    def values(name):
        return [{k: v for k, v in r.items() if k != "wall_seconds"} for r in read_metrics(tmp_path / name / "metrics.jsonl")]

    group = LockstepGroup()
    outcomes = group.run([lambda i=i: run_experiment(config(f"lock{i}", i), lockstep=group) for i in range(4)])
    assert all(isinstance(outcome, dict) for outcome in outcomes), outcomes
    stats = group.stats
    # Rounds 1 and 3: test and validation of 3 runs; rounds 2 and 4: test, validation and training
    # data of 4 runs.
    assert (stats.eval_batches, stats.batched_evals, stats.alone_evals) == (2 * 2 + 2 * 3, 2 * 2 * 3 + 2 * 3 * 4, 0)
    for i in range(4):
        run_experiment(config(f"alone{i}", i, "run.backend=sequential"))
        mine, theirs = values(f"lock{i}"), values(f"alone{i}")
        assert len(mine) == len(theirs) == (2 if i == 3 else 4)      # a record per evaluated round
        assert "val_loss" in theirs[-1] and "global_train_loss" in theirs[-1]
        for record, reference in zip(mine, theirs):
            assert record.keys() == reference.keys()
            for key, value in reference.items():
                assert record[key] == (pytest.approx(value, rel=1e-9, abs=1e-12) if isinstance(value, float) else value), key


def test_batched_evaluation_equals_evaluate_for_each_run():
    # evaluate_runs against fedhet.core.task.evaluate, run by run: shared test tensors (one task)
    # and each run's own tensors (another copy of the data), float64.
    from fedhet.backends.batched_eval import evaluate_runs
    from fedhet.core.task import evaluate

    config = _config("run.seed=3", *MLP)
    task = build_federation(config, torch.device("cpu")).task
    params = [task.spec.flatten(task.model, dtype=task.dtype) + 0.1 * torch.randn(task.spec.dim, dtype=task.dtype,
                                                                                    generator=torch.Generator().manual_seed(i))
              for i in range(3)]
    alone = [evaluate(task, p, batch_size=50) for p in params]
    import dataclasses
    copy_test = dataclasses.replace(task.test, inputs=task.test.inputs.clone(), targets=task.test.targets.clone())
    other = dataclasses.replace(task, test=copy_test)
    for tasks in ([task, task, task], [task, other, task]):
        together = evaluate_runs(tasks, params, batch_size=50)
        for (loss, accuracy), (loss_alone, accuracy_alone) in zip(together, alone):
            assert loss == pytest.approx(loss_alone, rel=1e-9) and accuracy == accuracy_alone
