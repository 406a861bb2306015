"""Stateless random streams derived from one run seed.

Every random choice in fedhet (partition, participation, batch order, initialisation, Hybrid+
draws) takes a generator seeded by ``derive_seed(run_seed, purpose, *indices)``. A stream depends
only on its key, never on how many numbers were drawn before, so:

- a run resumed from round t draws exactly what an uninterrupted run draws in round t;
- every backend (sequential, vectorised, multi-process) sees the same batches for client i in
  round t, whatever order it trains clients in.
"""
from __future__ import annotations

import hashlib

import numpy as np
import torch

_MASK63 = (1 << 63) - 1


def derive_seed(seed: int, purpose: str, *indices: int) -> int:
    """A 63-bit seed that depends only on ``(seed, purpose, indices)``.

    BLAKE2b of the key's text; stable across Python versions and platforms (``hash()`` is not).
    """
    key = f"{int(seed)}|{purpose}|" + ",".join(str(int(i)) for i in indices)
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & _MASK63


def torch_generator(seed: int, purpose: str, *indices: int, device: str | torch.device = "cpu") -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded by :func:`derive_seed`."""
    generator = torch.Generator(device=device)
    generator.manual_seed(derive_seed(seed, purpose, *indices))
    return generator


def numpy_generator(seed: int, purpose: str, *indices: int) -> np.random.Generator:
    """A NumPy ``Generator`` (PCG64) seeded by :func:`derive_seed`."""
    return np.random.default_rng(derive_seed(seed, purpose, *indices))
