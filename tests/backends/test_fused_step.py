"""The sequential backend's fused local step (fedhet.backends.fused_step, fedhet.models.mlp_step):
bitwise today's step (the hand-written gradient into the flat buffer, then the whole-vector update)
at the claims' shapes and random ones, equal to autograd's step in float64, and whole rounds of
every solver it covers bitwise the backend without it."""
import types

import pytest
import torch
import torch.nn.functional as F

from backend_cases import COHORT, SCENARIOS, SOLVERS, assert_same_round, make_solver, make_task, make_work
from fedhet.backends.fused_step import fused_step_obstacle
from fedhet.backends.mlp_grad import MLPGradient
from fedhet.backends.sequential import SequentialBackend
from fedhet.client.base import LocalSolver, segment_rule_obstacle
from fedhet.core.params import ParamSpec
from fedhet.models.logreg import LogisticRegression
from fedhet.models.mlp import MLP
from fedhet.models.mlp_step import MLPStep, step_obstacle

# Solvers whose step is w -= eta * direction with an elementwise correction: the fused step's.
COVERED = {"sgd", "fedprox", "scaffold", "feddyn", "fedadmm", "fedcm"}
LEARNING_RATE = 0.05


def sgd_rule(grad, w, part):
    return grad


def make_model(in_features, hidden, classes, dtype, seed):
    torch.manual_seed(seed)
    model = MLP(in_features, hidden, classes) if hidden is not None else LogisticRegression(in_features, classes)
    return model.to(dtype)


def batches(in_features, classes, sizes, dtype, seed):
    generator = torch.Generator().manual_seed(seed)
    return [(torch.rand(size, in_features, generator=generator).to(dtype),
             torch.randint(0, classes, (size,), generator=generator)) for size in sizes]


def todays_steps(model, w, data):
    """The sequential backend's step before fusing: MLPGradient into the flat g, then w -= eta g."""
    spec = ParamSpec.from_module(model)
    g = torch.full_like(w, float("nan"))
    gradient = MLPGradient(types.SimpleNamespace(model=model, spec=spec), w, g)  # type: ignore[arg-type]
    losses = []
    for inputs, targets in data:
        losses.append(gradient(w, inputs, targets))
        w.add_(g, alpha=-LEARNING_RATE)
    return losses


def fused_steps(model, w, data):
    step = MLPStep(model, ParamSpec.from_module(model), w)
    return [step(inputs, targets, LEARNING_RATE, sgd_rule) for inputs, targets in data]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(784, (200, 200), 10), (784, (200,), 62), (60, (), 10), (33, (17, 9, 5), 7)])
def test_fused_step_is_todays_step_bitwise(one_thread, dtype, shape):
    # The claims' batch sizes, batch 1 and partial last batches (an epoch of 50 + 50 + 13 examples).
    in_features, hidden, classes = shape
    model = make_model(in_features, hidden, classes, dtype, seed=len(hidden))
    x = ParamSpec.from_module(model).flatten(model, dtype=dtype)
    data = batches(in_features, classes, [16, 1, 50, 50, 13, 64, 37], dtype, seed=in_features)
    expected_w, w = x.clone(), x.clone()
    expected = todays_steps(model, expected_w, data)
    losses = fused_steps(model, w, data)
    assert all(a.dtype == b.dtype and torch.equal(a, b) for a, b in zip(losses, expected))
    assert torch.equal(w, expected_w)


@pytest.mark.parametrize("seed", range(6))
def test_fused_step_is_autograds_step_in_float64(seed):
    generator = torch.Generator().manual_seed(seed)
    in_features, classes = (int(v) for v in torch.randint(1, 40, (2,), generator=generator))
    classes = max(classes, 2)
    hidden = tuple(int(v) for v in torch.randint(1, 30, (seed % 4,), generator=generator))
    model = make_model(in_features, hidden if seed != 5 else None, classes, torch.float64, seed)
    spec = ParamSpec.from_module(model)
    w = spec.flatten(model, dtype=torch.float64)
    w += 0.3 * torch.randn(w.shape, generator=generator, dtype=torch.float64)
    for inputs, targets in batches(in_features, classes, [1, 7, 3], torch.float64, seed):
        point = w.clone().requires_grad_(True)
        logits = torch.func.functional_call(model, spec.views(point), (inputs,))
        loss = F.cross_entropy(logits, targets)
        (grad,) = torch.autograd.grad(loss, point)
        expected = point.detach() - LEARNING_RATE * grad
        got = MLPStep(model, spec, w)(inputs, targets, LEARNING_RATE, sgd_rule)
        torch.testing.assert_close(got, loss.detach(), rtol=0, atol=1e-12)
        torch.testing.assert_close(w, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("solver_name", sorted(COVERED))
@pytest.mark.parametrize("model", [["model.name=mlp", "model.hidden=[20,12]"], ["model.name=logreg"]])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sequential_rounds_with_and_without_the_fused_step_bitwise(one_thread, dtype, model, solver_name, scenario):
    task, config = make_task(*model, *SCENARIOS[scenario], "client.weight_decay=0.01", dtype=dtype)
    solver = make_solver(solver_name, config)
    assert fused_step_obstacle(task, solver) is None
    work = make_work(task, solver, COHORT)
    fused = SequentialBackend().train_cohort(task, solver, work)
    reference = SequentialBackend(fused_step=False).train_cohort(task, solver, work)
    assert_same_round(reference, fused, exact=True)


def test_which_solvers_and_models_take_the_fused_step():
    task, config = make_task("model.name=mlp", "model.hidden=[20,12]")
    covered = {name for name in SOLVERS if fused_step_obstacle(task, make_solver(name, config)) is None}
    assert covered == COVERED
    assert segment_rule_obstacle(make_solver("fedsam", config)) == "the solver's direction has no segment rule"
    clipped, clip_config = make_task("model.name=mlp", "model.hidden=[20,12]", "client.clip_norm=0.5")
    assert fused_step_obstacle(clipped, make_solver("sgd", clip_config)) == \
        "client.clip_norm scales by the whole gradient's norm"
    assert step_obstacle(torch.nn.Sequential(torch.nn.Linear(3, 2)), task.spec, F.cross_entropy) == \
        "the model is not fedhet's MLP or logistic regression"
    assert step_obstacle(task.model, task.spec, F.nll_loss) == "the loss is not F.cross_entropy"


def test_a_subclass_that_changes_the_direction_takes_the_whole_vector_step():
    class Momentumish(LocalSolver):
        def direction(self, w, x, grad_fn, local):
            loss, grad = self.gradient(w, grad_fn)
            return loss, 2 * grad

    class Stepping(LocalSolver):
        def step(self, w, x, grad_fn, learning_rate, local):
            return super().step(w, x, grad_fn, learning_rate, local)

    _, config = make_task("model.name=mlp")
    options = config.client.options
    assert segment_rule_obstacle(Momentumish(options)) == "the solver's direction has no segment rule"
    assert segment_rule_obstacle(Stepping(options)) == "the solver overrides step"
    assert segment_rule_obstacle(LocalSolver(options)) is None
    patched = LocalSolver(options)
    patched.direction = Momentumish(options).direction
    assert segment_rule_obstacle(patched) == "the solver instance has its own direction"
