"""The cohort's MLP gradient by batched matrix products against autograd per client and against the
vectorised backend's ``vmap`` path (float64), with padded batches and a finished (all-zero) client."""
import pytest
import torch
import torch.nn.functional as F

from backend_cases import make_task
from fedhet.backends.mlp_cohort_grad import CohortMLPGradient, cohort_mlp_gradient
from fedhet.backends.vectorized import make_cohort_grad, vmap_cohort_grad
from fedhet.core.params import bind_flat

SIZES = [5, 3, 0, 4]          # real examples per client in a batch of 5; client 2 has finished


def cohort_batch(task, generator):
    """``(w [K, d], inputs [K, 5, ...], targets, weights)``: random points near the model's, each
    client's batch from its own rows, weights 1/b on the b real examples."""
    x = task.spec.flatten(task.model, dtype=task.dtype)
    num_clients, batch = len(SIZES), max(SIZES)
    w = x + 0.1 * torch.randn(num_clients, x.numel(), generator=generator, dtype=task.dtype)
    index = torch.randint(0, task.train.targets.numel(), (num_clients, batch), generator=generator)
    weights = torch.zeros(num_clients, batch, dtype=task.dtype)
    for k, size in enumerate(SIZES):
        weights[k, :size] = 1.0 / size if size else 0.0
    return w, task.train.inputs[index], task.train.targets[index], weights


def autograd_client(task, point, inputs, targets):
    """Mean cross-entropy and its gradient on a real batch, by torch.autograd on the module."""
    g = torch.zeros_like(point)
    bind_flat(task.model, task.spec, point.clone(), g)
    loss = F.cross_entropy(task.model(inputs), targets)
    loss.backward()
    for param in task.model.parameters():
        param.grad = None
    return loss.detach(), g


@pytest.mark.parametrize("hidden", ["[20,12]", "[7]", "[]"])
def test_cohort_gradient_is_autograd_per_client(hidden):
    task, _ = make_task("model.name=mlp", f"model.hidden={hidden}")
    w, inputs, targets, weights = cohort_batch(task, torch.Generator().manual_seed(3))
    losses, grads = CohortMLPGradient(task)(w, inputs, targets, weights)
    assert losses.shape == (len(SIZES),) and grads.shape == w.shape
    for k, size in enumerate(SIZES):
        if size == 0:      # a finished client: zero weight, zero loss and gradient
            assert losses[k] == 0 and not grads[k].any()
            continue
        loss, grad = autograd_client(task, w[k], inputs[k, :size], targets[k, :size])
        torch.testing.assert_close(losses[k], loss, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(grads[k], grad, rtol=1e-10, atol=1e-13)


def test_cohort_gradient_equals_the_vmap_path():
    task, _ = make_task("model.name=mlp", "model.hidden=[20,12]")
    w, inputs, targets, weights = cohort_batch(task, torch.Generator().manual_seed(5))
    losses, grads = CohortMLPGradient(task)(w, inputs, targets, weights)
    vmap_losses, vmap_grads = vmap_cohort_grad(task)(w, inputs, targets, weights)
    torch.testing.assert_close(losses, vmap_losses, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(grads, vmap_grads, rtol=1e-10, atol=1e-13)


def test_other_models_take_the_vmap_path():
    task, _ = make_task("model.name=logreg")
    assert cohort_mlp_gradient(task) is None
    assert not isinstance(make_cohort_grad(task), CohortMLPGradient)
    mlp_task, _ = make_task("model.name=mlp", "model.hidden=[4]")
    assert isinstance(make_cohort_grad(mlp_task), CohortMLPGradient)
