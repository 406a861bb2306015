"""The hand-written MLP gradient against autograd (bitwise), and the sequential backend with it
against the sequential backend on autograd (bitwise, every solver)."""
import pytest
import torch
import torch.nn.functional as F

from backend_cases import SOLVERS, assert_same_round, make_solver, make_task, make_work
from fedhet.backends.mlp_grad import MLPGradient, mlp_gradient, mlp_obstacle
from fedhet.backends.sequential import SequentialBackend
from fedhet.core.params import bind_flat

MLP = ["model.name=mlp", "model.hidden=[20,12]"]


def autograd_gradient(task, point, inputs, targets):
    w = point.clone()
    g = torch.zeros_like(w)
    bind_flat(task.model, task.spec, w, g)
    loss = task.loss_fn(task.model(inputs), targets)
    loss.backward()
    for param in task.model.parameters():
        param.grad = None
    return loss.detach(), g


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("hidden", ["[20,12]", "[7]", "[]"])
@pytest.mark.parametrize("batch", [1, 5, 32])
def test_gradient_is_autograd_bitwise(one_thread, dtype, hidden, batch):
    task, _ = make_task("model.name=mlp", f"model.hidden={hidden}", dtype=dtype)
    assert mlp_obstacle(task) is None
    generator = torch.Generator().manual_seed(batch)
    x = task.spec.flatten(task.model, dtype=task.dtype).clone()
    x += 0.1 * torch.randn(x.shape, generator=generator, dtype=x.dtype)
    idx = torch.randint(0, len(task.train), (batch,), generator=generator)
    inputs, targets = task.train.inputs[idx], task.train.targets[idx]
    expected_loss, expected_grad = autograd_gradient(task, x, inputs, targets)

    w = x.clone()
    g = torch.full_like(w, float("nan"))        # every entry must be written: no zeroing needed
    gradient = MLPGradient(task, w, g)
    loss = gradient(w, inputs, targets)
    assert loss.dtype == expected_loss.dtype and torch.equal(loss, expected_loss)
    assert torch.equal(g, expected_grad)
    # At another point than the bound w (FedSAM's perturbed gradient): w itself is not touched.
    other = x + 0.05
    expected_loss, expected_grad = autograd_gradient(task, other, inputs, targets)
    assert torch.equal(gradient(other, inputs, targets), expected_loss)
    assert torch.equal(g, expected_grad) and torch.equal(w, x)


def test_other_models_and_losses_use_autograd():
    task, _ = make_task("model.name=logreg")
    assert mlp_obstacle(task) == "the model is not fedhet's MLP"
    assert mlp_gradient(task, torch.zeros(task.spec.dim), torch.zeros(task.spec.dim)) is None
    task, _ = make_task(*MLP)
    task.loss_fn = lambda outputs, targets: F.cross_entropy(outputs, targets, label_smoothing=0.1)
    assert mlp_obstacle(task) == "the loss is not F.cross_entropy"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("solver_name", SOLVERS)
@pytest.mark.parametrize("extra", [[], ["client.weight_decay=0.01", "client.clip_norm=0.5"]])
def test_sequential_with_and_without_the_hand_written_gradient_bitwise(one_thread, dtype, solver_name, extra):
    task, config = make_task(*MLP, "client.batch_size=8", "client.epochs=2", *extra, dtype=dtype)
    solver = make_solver(solver_name, config)
    work = make_work(task, solver, [0, 3, 4, 8])
    fused = SequentialBackend().train_cohort(task, solver, work)
    reference = SequentialBackend(hand_written_mlp=False).train_cohort(task, solver, work)
    assert_same_round(reference, fused, exact=True)
