"""Where a run computes: its device (``run.device``) and torch's intra-op threads (``run.threads``)."""
from __future__ import annotations

from typing import Optional

import torch

from fedhet.core.machine import usable_cpus
from fedhet.core.options import ConfigError


def cpu_capability() -> str:
    """The vector instruction set torch's CPU kernels were chosen for (``AVX2``, ``AVX512``, ...):
    float32 runs repeat bit for bit only on CPUs of one capability (docs/design.md, "Randomness"),
    so each run's summary records it."""
    return torch.backends.cpu.get_cpu_capability()


def resolve_device(name: str) -> torch.device:
    """``auto`` -> the first CUDA GPU when present, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    # A device this machine lacks is the user's to fix, not a bug: a configuration error (exit 2).
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("run.device", name, "no CUDA GPU is available here; use 'auto' or 'cpu'")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ConfigError("run.device", name, f"this machine has {torch.cuda.device_count()} CUDA GPU(s), "
                                              f"cuda:0..cuda:{torch.cuda.device_count() - 1}")
    if device.type == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise ConfigError("run.device", name, "Apple's MPS is not available here; use 'auto' or 'cpu'")
    return device


def configure_threads(threads: Optional[int], device: torch.device) -> int:
    """Set torch's intra-op threads: ``run.threads`` when given (capped at the usable CPUs), else one.

    One thread per process is the CPU default because federated simulation runs many small kernels,
    where a second intra-op thread gains little and, with any other busy process on the machine,
    oversubscription slowed a small MLP loop 50x in measurements here; the multi-process backend
    uses the other cores instead.
    """
    count = usable_cpus(threads) if threads is not None else 1
    torch.set_num_threads(max(1, count))
    return torch.get_num_threads()
