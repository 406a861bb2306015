"""Parameter counts against hand computation from the papers' layer tables."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from fedhet.models import build_model, count_parameters


def linear(n_in: int, n_out: int, bias: bool = True) -> int:
    return n_in * n_out + (n_out if bias else 0)


def conv(c_in: int, c_out: int, k: int, bias: bool = True) -> int:
    return c_in * c_out * k * k + (c_out if bias else 0)


def test_mlp_matches_fedavg_paper_count():
    # McMahan et al. 2017: "2-hidden layers with 200 units each ... (199,210 total parameters)"
    expected = linear(784, 200) + linear(200, 200) + linear(200, 10)
    assert expected == 199_210
    assert count_parameters(build_model("mlp", (1, 28, 28), 10)) == expected


def test_mlp_custom_hidden():
    model = build_model("mlp", (60,), 5, hidden=[7])
    assert count_parameters(model) == linear(60, 7) + linear(7, 5)
    assert count_parameters(build_model("mlp", (60,), 5, hidden=[])) == linear(60, 5)


def test_fedavg_cnn_matches_paper_count():
    # McMahan et al. 2017: "(1,663,370 total parameters)"; 'same' 5x5 convs: 28 -> 14 -> 7.
    expected = conv(1, 32, 5) + conv(32, 64, 5) + linear(7 * 7 * 64, 512) + linear(512, 10)
    assert expected == 1_663_370
    assert count_parameters(build_model("cnn", (1, 28, 28), 10)) == expected


def test_fedavg_cnn_generalises_to_rgb_32x32():
    expected = conv(3, 32, 5) + conv(32, 64, 5) + linear(8 * 8 * 64, 512) + linear(512, 100)
    assert count_parameters(build_model("cnn", (3, 32, 32), 100)) == expected


def test_logreg_count():
    assert count_parameters(build_model("logreg", (60,), 10)) == 610
    assert count_parameters(build_model("logreg", (60,), 10, bias=False)) == 600


def test_cnn5_matches_fedaware_count():
    # 32 -conv3-> 30 -pool-> 15 -conv3-> 13 -pool-> 6 -conv3-> 4: 4*4*64 = 1024 features.
    expected = conv(3, 32, 3) + conv(32, 64, 3) + conv(64, 64, 3) + linear(1024, 64) + linear(64, 10)
    assert expected == 122_570
    assert count_parameters(build_model("cnn5", (3, 32, 32), 10)) == expected


@pytest.mark.parametrize("variant, classes, widths", [
    ("svhn", 10, [128]),
    ("cifar10", 10, [256, 64]),
    ("cifar100", 100, [512, 256]),
    ("cinic10", 10, [512, 256]),
])
def test_fedau_cnn_counts(variant, classes, widths):
    # Two 3x3 'same' convs with 32 filters, each followed by 2x2 max-pool: 32 -> 16 -> 8.
    features = [8 * 8 * 32, *widths, classes]
    expected = conv(3, 32, 3) + conv(32, 32, 3) + sum(linear(a, b) for a, b in zip(features[:-1], features[1:]))
    assert count_parameters(build_model("fedau_cnn", (3, 32, 32), classes, variant=variant)) == expected


def test_fedau_cnn_table_figures():
    # The figures quoted in the fedau_cnn docstring, computed by hand.
    assert 896 + 9_248 + 262_272 + 1_290 == 273_706
    assert 896 + 9_248 + 524_544 + 16_448 + 650 == 551_786
    assert 896 + 9_248 + 1_049_088 + 131_328 + 25_700 == 1_216_260
    assert 896 + 9_248 + 1_049_088 + 131_328 + 2_570 == 1_193_130
    assert count_parameters(build_model("fedau_cnn", (3, 32, 32), 10, variant="svhn")) == 273_706


def test_fedau_cnn_hidden_override_sets_layer_count():
    model = build_model("fedau_cnn", (3, 32, 32), 10, variant="svhn", hidden=[64, 32, 16])
    assert len(model.hidden_layers) == 3
    features = [2048, 64, 32, 16, 10]
    expected = conv(3, 32, 3) + conv(32, 32, 3) + sum(linear(a, b) for a, b in zip(features[:-1], features[1:]))
    assert count_parameters(model) == expected


def resnet18_gn_count(in_channels: int, num_classes: int, stem_kernel: int) -> int:
    """ResNet-18 (BasicBlock x [2, 2, 2, 2]) with GroupNorm (2 params per channel), by hand."""

    def norm(channels: int) -> int:
        return 2 * channels

    total = conv(in_channels, 64, stem_kernel, bias=False) + norm(64)
    c_in = 64
    for width in (64, 128, 256, 512):
        for _ in range(2):
            total += conv(c_in, width, 3, bias=False) + norm(width)
            total += conv(width, width, 3, bias=False) + norm(width)
            if c_in != width:  # the first block of stages 2-4 downsamples with a 1x1 conv + GN
                total += conv(c_in, width, 1, bias=False) + norm(width)
            c_in = width
    return total + linear(512, num_classes)


def test_resnet18_gn_counts():
    assert resnet18_gn_count(3, 10, 3) == 11_173_962
    assert resnet18_gn_count(3, 10, 7) == 11_181_642
    assert count_parameters(build_model("resnet18_gn", (3, 32, 32), 10)) == 11_173_962
    assert count_parameters(build_model("resnet18_gn", (3, 32, 32), 10, stem="imagenet")) == 11_181_642
    assert count_parameters(build_model("resnet18_gn", (3, 64, 64), 200, stem="imagenet", groups=32)) == \
        resnet18_gn_count(3, 200, 7)


def test_pfl_cnn_matches_pfl_research_simple_cnn():
    # pfl-research's simple_cnn: 32 -conv3-> 30 -conv3-> 28 -pool-> 14: 14*14*64 = 12,544 features, dense 128.
    expected = conv(3, 32, 3) + conv(32, 64, 3) + linear(12_544, 128) + linear(128, 10)
    assert expected == 1_626_442
    model = build_model("pfl_cnn", (3, 32, 32), 10)
    assert count_parameters(model) == expected
    # dropout as pfl has it (0.25 after pooling, 0.5 after the hidden layer); dropout = false removes both
    rates = [m.p for m in model.modules() if isinstance(m, nn.Dropout)]
    assert rates == [0.25, 0.5]
    plain = build_model("pfl_cnn", (3, 32, 32), 10, dropout=False)
    assert count_parameters(plain) == expected and not any(isinstance(m, nn.Dropout) for m in plain.modules())
    assert plain(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


def test_pfl_cnn_refuses_images_too_small():
    with pytest.raises(ValueError, match="pfl_cnn.*too small"):
        build_model("pfl_cnn", (3, 5, 5), 10)
