"""The vectorised backend gives the sequential backend's numbers (float64, tight tolerance) for every
registered local solver, with unequal clients, partial batches, fixed steps and Hybrid+."""
import warnings

import pytest
import torch
from torch import nn

from backend_cases import COHORT, SCENARIOS, SOLVERS, assert_same_round, make_solver, make_task, make_work
from fedhet.backends.sequential import SequentialBackend
from fedhet.backends.vectorized import VectorizedBackend, padded_round_batches, unsupported_reason
from fedhet.client.base import ClientOptions, LocalSolver
from fedhet.core.task import build_task
from fedhet.engine.backend_choice import select_backend


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("solver_name", SOLVERS)
def test_vectorized_matches_sequential_for_every_solver(solver_name, scenario):
    task, config = make_task("model.name=mlp", "model.hidden=[12]", *SCENARIOS[scenario])
    solver = make_solver(solver_name, config)
    work = make_work(task, solver, COHORT)
    reference = SequentialBackend().train_cohort(task, solver, work)
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no silent fallback to the sequential code
        result = VectorizedBackend().train_cohort(task, solver, work)
    assert_same_round(reference, result, exact=False)
    if scenario == "hybrid-plus":               # the scenario really has unequal step counts
        assert len(set(reference[0].local_steps.tolist())) > 1


def test_vectorized_logistic_regression_and_float32():
    task, config = make_task("model.name=logreg", "client.batch_size=16", dtype="float32")
    solver = make_solver("sgd", config)
    work = make_work(task, solver, COHORT)
    assert_same_round(SequentialBackend().train_cohort(task, solver, work),
                      VectorizedBackend().train_cohort(task, solver, work), exact=False, rtol=1e-5, atol=1e-6)


def test_padded_batches_weight_each_real_example_by_one_over_its_batch():
    task, config = make_task("model.name=logreg", "client.system=hybrid_plus")
    solver = make_solver("sgd", config)
    work = make_work(task, solver, COHORT)
    index, weight, batches, num_steps = padded_round_batches(task, solver, work)
    assert index.shape == weight.shape == (int(num_steps.max()), len(COHORT), index.shape[2])
    for k, client in enumerate(COHORT):
        start, end = task.client_range(client)
        assert ((index[:, k] >= start) & (index[:, k] < end)).all()       # padding stays in the client
        for s in range(index.shape[0]):
            total = float(weight[s, k].sum())
            if s < num_steps[k]:
                size = len(batches[k][s])
                assert torch.equal(index[s, k, :size], batches[k][s])
                assert total == pytest.approx(1.0) and (weight[s, k, size:] == 0).all()
            else:
                assert total == 0.0                                          # finished: frozen


class _Dropout(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.drop = nn.Linear(60, 10), nn.Dropout(0.5)

    def forward(self, x):
        return self.fc(self.drop(x))


def test_dropout_model_falls_back_to_sequential_with_a_notice():
    base, config = make_task("model.name=logreg")
    offsets = base.client_offsets.tolist()
    partition = [torch.arange(a, b) for a, b in zip(offsets[:-1], offsets[1:])]
    task = build_task(_Dropout(), base.train, base.test, partition, num_classes=10, device=torch.device("cpu"),
                      dtype=torch.float64)
    solver = make_solver("sgd", config)
    work = make_work(task, solver, COHORT)
    assert "dropout" in unsupported_reason(task, solver)
    reference = SequentialBackend().train_cohort(task, solver, work)
    with pytest.warns(RuntimeWarning, match="dropout"):
        result = VectorizedBackend().train_cohort(task, solver, work)
    assert_same_round(reference, result, exact=True)     # it *is* the sequential code, same seeds
    backend, reason = select_backend("vectorized", task, solver)
    assert backend.name == "sequential" and "dropout" in reason


class _RowUnawareSolver(LocalSolver):
    vectorizable = False


def test_solver_that_opts_out_is_not_vectorized():
    task, _ = make_task("model.name=logreg")
    assert "not vectorizable" in unsupported_reason(task, _RowUnawareSolver(ClientOptions()))
    assert unsupported_reason(task, LocalSolver(ClientOptions())) is None


def test_loss_that_is_not_a_mean_of_example_losses_is_refused():
    task, _ = make_task("model.name=logreg")
    task.loss_fn = lambda outputs, targets: nn.functional.cross_entropy(outputs, targets, reduction="sum")
    assert "mean of per-example losses" in unsupported_reason(task, None)


def _jitter(inputs, generator):
    """A random augmentation drawn from the client's generator (stands in for crops and flips)."""
    return inputs + 0.1 * torch.randn(inputs.shape, generator=generator, dtype=inputs.dtype)


@pytest.mark.parametrize("system", ["fixed", "hybrid_plus"])
def test_augmentation_draws_each_clients_stream_on_its_real_batch(system):
    base, config = make_task("model.name=mlp", "model.hidden=[12]", "client.batch_size=16", f"client.system={system}")
    offsets = base.client_offsets.tolist()
    partition = [torch.arange(a, b) for a, b in zip(offsets[:-1], offsets[1:])]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(60, 12), nn.ReLU(), nn.Linear(12, 10))
    task = build_task(model, base.train, base.test, partition, num_classes=10, device=torch.device("cpu"),
                      dtype=torch.float64, train_transform=_jitter)
    solver = make_solver("fedsam", config)
    work = make_work(task, solver, COHORT)
    reference = SequentialBackend().train_cohort(task, solver, work)
    assert_same_round(reference, VectorizedBackend().train_cohort(task, solver, work), exact=False)
    plain = build_task(model, base.train, base.test, partition, num_classes=10, device=torch.device("cpu"),
                       dtype=torch.float64)
    assert not torch.allclose(SequentialBackend().train_cohort(plain, solver, work)[0].deltas, reference[0].deltas)
