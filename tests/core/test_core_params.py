import torch
from torch import nn

from fedhet.core.params import ParamSpec, bind_flat


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 3))


def test_flatten_and_views_round_trip():
    model = _model()
    spec = ParamSpec.from_module(model)
    flat = spec.flatten(model)
    assert spec.dim == 5 * 4 + 4 + 4 * 3 + 3 == flat.numel()
    for (name, param), view in zip(model.named_parameters(), spec.views(flat).values()):
        assert torch.equal(param, view)
    stacked = torch.stack([flat, 2 * flat])
    views = spec.views(stacked)
    assert views["0.weight"].shape == (2, 4, 5)
    assert torch.equal(views["0.weight"][1], 2 * model[0].weight)


def test_bound_backward_accumulates_into_flat_gradient_like_autograd():
    reference, model = _model(), _model()
    inputs, targets = torch.randn(8, 5), torch.randint(0, 3, (8,))
    nn.functional.cross_entropy(reference(inputs), targets).backward()
    expected = torch.cat([p.grad.reshape(-1) for p in reference.parameters()])

    spec = ParamSpec.from_module(model)
    w = spec.flatten(model).clone()
    g = torch.zeros_like(w)
    bind_flat(model, spec, w, g)
    nn.functional.cross_entropy(model(inputs), targets).backward()
    assert torch.allclose(g, expected)
    # Writing the flat vector changes the module.
    w.zero_()
    assert torch.count_nonzero(model(inputs)) == 0


def test_slices_select_named_parameters():
    model = _model()
    spec = ParamSpec.from_module(model)
    idx = spec.slices(["2.bias"])
    flat = spec.flatten(model)
    assert torch.equal(flat[idx], model[2].bias.detach())
