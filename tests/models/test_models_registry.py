"""build_model, the registry entries, option validation and input-shape errors."""
from __future__ import annotations

import pytest
import torch

import fedhet.models  # noqa: F401  (registers the models)
from fedhet.core.options import ConfigError
from fedhet.core.registry import MODELS
from fedhet.models import build_model, count_parameters


def test_every_model_is_registered():
    assert set(MODELS.names()) == {"mlp", "cnn", "logreg", "cnn5", "resnet18_gn", "fedau_cnn", "neox_classifier",
                                   "pfl_cnn"}
    for name in MODELS.names():
        assert MODELS.get(name).summary, f"{name} needs a one-line docstring summary"


def test_unknown_model_name_is_a_config_error_with_suggestion():
    with pytest.raises(ConfigError, match=r"model\.name.*did you mean 'resnet18_gn'"):
        build_model("resnet18", (3, 32, 32), 10)


def test_unknown_option_names_the_key_and_allowed_keys():
    with pytest.raises(ConfigError, match=r"model\.hiden.*did you mean model\.hidden"):
        build_model("mlp", (784,), 10, hiden=[10])


@pytest.mark.parametrize("name, options, key", [
    ("mlp", {"hidden": [200, 0]}, "model.hidden[1]"),
    ("cnn", {"conv_channels": [32]}, "model.conv_channels"),
    ("cnn5", {"init": "xavier"}, "model.init"),
    ("fedau_cnn", {"variant": "mnist"}, "model.variant"),
    ("fedau_cnn", {"dropout": 1.0}, "model.dropout"),
    ("resnet18_gn", {"groups": 3}, "model.groups"),
    ("resnet18_gn", {"stem": "tiny"}, "model.stem"),
])
def test_bad_option_values_raise_config_error(name, options, key):
    with pytest.raises(ConfigError) as info:
        build_model(name, (3, 32, 32), 10, **options)
    assert info.value.key == key


@pytest.mark.parametrize("name, shape, message", [
    ("cnn", (3, 32), r"too small|\(channels, height, width\)"),
    ("cnn5", (3, 16, 16), "too small"),
    ("cnn", (2, 3, 32, 32), "image shape"),
    ("mlp", (), "non-empty"),
])
def test_bad_input_shapes_raise_value_error(name, shape, message):
    with pytest.raises(ValueError, match=message):
        build_model(name, shape, 10)


def test_bad_num_classes():
    with pytest.raises(ValueError, match="num_classes"):
        build_model("mlp", (784,), 0)


def test_greyscale_shape_without_channel_axis():
    # (H, W) is read as one channel; the module accepts [B, H, W].
    torch.manual_seed(0)
    a = build_model("cnn", (28, 28), 10)
    torch.manual_seed(0)
    b = build_model("cnn", (1, 28, 28), 10)
    x = torch.randn(2, 28, 28)
    torch.testing.assert_close(a(x), b(x.unsqueeze(1)))


def test_count_parameters_counts_shared_tensors_once_and_trainable_only():
    linear = torch.nn.Linear(3, 2)
    shared = torch.nn.Sequential(linear, linear)
    assert count_parameters(shared) == 8
    linear.bias.requires_grad_(False)
    assert count_parameters(shared, trainable_only=True) == 6
