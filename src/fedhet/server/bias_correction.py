"""Adam-style bias correction of exponential moment averages, shared by the adaptive server optimisers.

``torch.optim.Adam`` divides ``m`` by ``1 - b1^t`` and ``v`` by ``1 - b2^t`` after ``t`` steps (both
averages start at zero and are biased towards it). Reddi et al.'s FedAdagrad / FedAdam / FedYogi
(:mod:`fedhet.algorithms.adaptive`) and Wang, Lin, Chen's FedAMS / FedAMSGrad
(:mod:`fedhet.algorithms.fedams`) offer it as ``server.bias_correction`` (off by default, as in the
papers' pseudo-code; docs/algorithms.md section 1).
"""
from __future__ import annotations


def bias_corrections(beta1: float, beta2: float, step: int, enabled: bool) -> tuple[float, float]:
    """``(1 - b1^t, 1 - b2^t)`` for ``t = step`` when bias correction is on, else ``(1, 1)``."""
    if not enabled:
        return 1.0, 1.0
    return 1.0 - beta1 ** step, 1.0 - beta2 ** step
