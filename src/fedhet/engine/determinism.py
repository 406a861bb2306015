"""Deterministic GPU kernels for the duration of a round.

Same config and seed, same numbers: on a CPU that holds already. On CUDA, cuDNN may pick
convolution algorithms whose weight gradients are accumulated with atomics (a different rounding
order on each call), and with autotuning on (``cudnn.benchmark``) it may pick a different algorithm
from one run to the next. fedhet therefore runs every round with ``cudnn.deterministic = True`` and
``cudnn.benchmark = False`` and restores the caller's settings afterwards: library code does not
leave global state changed. TF32 stays at PyTorch's defaults (cuDNN convolutions use it on GPUs
that have it), which is deterministic but differs from a CPU run by about 1e-3 relative.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch


@contextlib.contextmanager
def deterministic_kernels(device: torch.device) -> Iterator[None]:
    """Within the block, cuDNN is deterministic and not autotuned when ``device`` is a CUDA device;
    nothing changes for any other device."""
    if device.type != "cuda":
        yield
        return
    cudnn = torch.backends.cudnn
    saved = cudnn.deterministic, cudnn.benchmark
    cudnn.deterministic, cudnn.benchmark = True, False
    try:
        yield
    finally:
        cudnn.deterministic, cudnn.benchmark = saved
