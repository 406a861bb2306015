"""The effective step count of a local step with a proximal pull towards ``x``: a building block of
the solvers whose local recursion contracts towards the round's start (FedProx, FedDyn, FedADMM,
FedSpeed), for FedNova's normalisation (:mod:`fedhet.algorithms.fednova`)."""
from __future__ import annotations

import math

import torch


def prox_effective_steps(num_steps: torch.Tensor, learning_rate: float, weight: float) -> torch.Tensor:
    """FedNova's ``a_i = sum_{k<K} (1 - eta_l weight)^k`` for a local step with a proximal pull
    ``weight (w - x)`` (Wang et al. 2020, FedNova, Section 4 "FedProx"), in float64.

    With ``q = 1 - eta_l weight``: ``a = (1 - q^K) / (eta_l weight)``, evaluated as
    ``-expm1(K log1p(-eta_l weight)) / (eta_l weight)`` for ``0 < eta_l weight < 1`` so that tiny
    weights do not lose precision; ``a = K`` when the weight is 0.
    """
    steps = num_steps.to(torch.float64)
    shrink = learning_rate * weight
    if shrink == 0:
        return steps
    if shrink < 1:
        return -torch.expm1(steps * math.log1p(-shrink)) / shrink
    return (1 - (1 - shrink) ** steps) / shrink
