"""The roofline's FLOP counter (benchmarks/roofline.py) against hand computations. Nothing is timed."""
import torch
from torch import nn

from benchmark_loader import load_benchmark


def load_roofline():
    return load_benchmark("roofline")


def test_linear_forward_flops_are_two_in_out_per_example():
    roofline = load_roofline()
    counted = roofline.count_round(nn.Linear(3, 2), clients=1, client_size=4, batch=2, test_images=5,
                                   eval_batch=5, example_shape=(1, 3))
    assert counted["forward_flops_per_example"] == 2 * 3 * 2
    assert counted["train_flops"] == 3 * 12 * 4           # 3x forward, 4 training examples
    assert counted["eval_flops"] == 12 * 5
    d = 3 * 2 + 2
    assert counted["param_bytes"] == 6 * 4 * d * 2         # 2 steps of 2
    assert counted["activation_bytes"] == 3 * 4 * (3 + 2) * 4


def test_conv_macs_are_output_elements_times_kernel_volume():
    roofline = load_roofline()
    layers = roofline.layer_shapes(nn.Conv2d(2, 4, 3, padding=1), torch.zeros(1, 2, 5, 5))
    assert layers[0]["macs"] == (4 * 5 * 5) * (2 * 3 * 3)
