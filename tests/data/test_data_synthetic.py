"""FedProx Synthetic(alpha, beta): determinism, documented shapes, and the generating law."""
import numpy as np
import pytest
import torch

import fedhet.data.datasets  # noqa: F401  (registers the datasets)
import fedhet.data.partition  # noqa: F401  (registers the partitioners)
from fedhet.core.options import ConfigError, build_options
from fedhet.core.registry import DATASETS, PARTITIONERS
from fedhet.data.synthetic import (
    feature_covariance_diagonal,
    generate_synthetic_devices,
    make_synthetic,
    synthetic_device_sizes,
)


def test_same_seed_same_data_other_seed_other_data():
    first, again, other = make_synthetic(seed=4), make_synthetic(seed=4), make_synthetic(seed=5)
    assert torch.equal(first.train.inputs, again.train.inputs) and torch.equal(first.test.targets, again.test.targets)
    assert all(torch.equal(a, b) for a, b in zip(first.client_indices, again.client_indices))
    assert len(first.train) != len(other.train) or not torch.equal(first.train.inputs, other.train.inputs)


def test_documented_shapes_sizes_and_natural_split():
    bundle = make_synthetic(1.0, 1.0, num_devices=30, seed=0)
    sizes = synthetic_device_sizes(30, seed=0)
    assert sizes.min() >= 50
    train_sizes = [int(0.8 * n) for n in sizes]
    assert bundle.name == "synthetic" and bundle.num_classes == 10 and bundle.input_shape == (60,)
    assert bundle.train.inputs.dtype == torch.float32 and bundle.train.inputs.shape == (sum(train_sizes), 60)
    assert bundle.train.targets.dtype == torch.int64 and len(bundle.test) == int(sizes.sum()) - sum(train_sizes)
    assert 0 <= int(bundle.train.targets.min()) and int(bundle.train.targets.max()) <= 9
    assert [len(part) for part in bundle.client_indices] == train_sizes
    assert torch.equal(torch.cat(bundle.client_indices), torch.arange(len(bundle.train)))


def test_adding_devices_keeps_the_first_devices():
    small, large = make_synthetic(seed=2, num_devices=3), make_synthetic(seed=2, num_devices=5)
    n = len(small.train)
    assert torch.equal(small.train.inputs, large.train.inputs[:n])


def test_iid_inputs_follow_n_0_sigma():
    # iid: v_k = 0, so x ~ N(0, diag(j^-1.2)) on every device; check mean and variance per feature.
    bundle = make_synthetic(seed=1, num_devices=60, iid=True)
    x = torch.cat([bundle.train.inputs, bundle.test.inputs]).double().numpy()
    n = len(x)
    assert n > 5000
    variance = feature_covariance_diagonal()
    assert np.allclose(variance[:3], [1.0, 2.0 ** -1.2, 3.0 ** -1.2])
    # Standard errors: mean sqrt(var/n), variance var*sqrt(2/n); allow 5 of them.
    assert np.all(np.abs(x.mean(0)) < 5 * np.sqrt(variance / n))
    assert np.all(np.abs(x.var(0) / variance - 1) < 5 * np.sqrt(2 / n))


def test_labels_are_the_argmax_of_each_device_model_and_models_follow_the_prior():
    devices = generate_synthetic_devices(2.0, 1.0, num_devices=200, seed=6, max_device_size=60)
    for device in devices[:5]:
        logits = device.inputs @ device.weights + device.bias
        softmax = np.exp(logits - logits.max(1, keepdims=True))
        softmax /= softmax.sum(1, keepdims=True)
        assert np.array_equal(device.labels, softmax.argmax(1))
    # W_k and b_k are N(u_k, 1) with u_k ~ N(0, alpha^2): the 610 entries' mean estimates u_k
    # (error 1/sqrt(610)), and their spread across devices estimates alpha = 2.
    model_means = np.array([np.concatenate([d.weights.ravel(), d.bias]).mean() for d in devices])
    assert abs(model_means.std() - 2.0) < 0.3
    within = np.array([np.concatenate([d.weights.ravel(), d.bias]).std() for d in devices])
    assert np.allclose(within, 1.0, atol=0.15)
    shared = generate_synthetic_devices(2.0, 1.0, num_devices=3, seed=6, iid=True)
    assert all(np.array_equal(d.weights, shared[0].weights) and not d.center.any() for d in shared)


def test_beta_spreads_the_device_input_means():
    # mean over features of v_k is B_k + N(0, 1/60) noise: its spread across devices is ~beta.
    def spread(beta):
        bundle = make_synthetic(0.0, beta, seed=7, num_devices=40)
        means = [float(bundle.train.inputs[part].mean()) for part in bundle.client_indices]
        return float(np.std(means))

    assert spread(0.0) < 0.4
    assert 3.0 < spread(5.0) < 8.0


def test_max_device_size_caps_every_device():
    bundle = make_synthetic(seed=0, max_device_size=60)
    assert max(len(part) for part in bundle.client_indices) <= int(0.8 * 60)


@pytest.mark.parametrize("kwargs, fragment", [
    ({"num_devices": 0}, "num_devices"), ({"alpha": -1.0}, "alpha"), ({"train_fraction": 1.0}, "train_fraction"),
])
def test_bad_arguments(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        make_synthetic(seed=0, **kwargs)


def test_registered_dataset_and_natural_partition():
    entry = DATASETS.get("synthetic")
    options = build_options(entry.options_cls, {"alpha": 0.5, "beta": 0.5, "num_devices": 12}, section="data")
    bundle = entry.factory(options, seed=11)
    assert len(bundle.client_indices) == 12
    natural = PARTITIONERS.get("natural")
    parts = natural.factory(build_options(natural.options_cls, {}, section="partition"), targets=bundle.train.targets,
                            num_classes=10, seed=0, natural=bundle.client_indices)
    assert all(torch.equal(a, b) for a, b in zip(parts, bundle.client_indices))
    with pytest.raises(ConfigError, match="data.num_devices"):
        build_options(entry.options_cls, {"num_devices": 0}, section="data")


def test_synthetic_num_devices_beyond_memory_is_refused_before_generation():
    """Campaign 2026-11-24 finding R2: data.num_devices = 1e7 generated devices until memory ran out."""
    import time

    import pytest

    from fedhet.data.synthetic import SyntheticTooLargeError, check_synthetic_fits, make_synthetic

    started = time.monotonic()
    with pytest.raises(SyntheticTooLargeError, match=r"data.num_devices = 10000000: at least .* GB"):
        check_synthetic_fits(10_000_000, None, available=8 * 10**9)
    with pytest.raises(SyntheticTooLargeError):
        make_synthetic(num_devices=10**11, seed=0)          # the machine's own free memory
    assert time.monotonic() - started < 5
    check_synthetic_fits(30, None, available=8 * 10**9)     # the usual sizes pass
    check_synthetic_fits(1_000_000, 2, available=8 * 10**9)   # two examples per device fit
