"""The papers' models, registered in :data:`fedhet.core.registry.MODELS`.

=================  ===========================================================  ==================
name               model                                                        module
=================  ===========================================================  ==================
mlp                FedAvg MLP 784-200-200-10 (McMahan et al. 2017)              ``mlp``
cnn                FedAvg CNN for 28x28 images, 1,663,370 parameters            ``cnn``
logreg             logistic regression (Synthetic: 60 -> 10)                    ``logreg``
cnn5               FedAWARE 5-layer CIFAR-10 CNN, 122,570 parameters            ``cnn5``
resnet18_gn        ResNet-18 with GroupNorm (FedSpeed, FedAWARE)                ``resnet_gn``
fedau_cnn          FedAU paper CNNs (SVHN, CIFAR-10/100, CINIC-10)              ``fedau_cnn``
neox_classifier    GPT-NeoX / Pythia-70M sequence classifier (needs fedhet[nlp])  ``neox``
pfl_cnn            pfl-research's simple_cnn (its CIFAR-10 benchmark), 1,626,442  ``pfl_cnn``
=================  ===========================================================  ==================

Every factory has the signature ``factory(options, *, input_shape, num_classes) -> nn.Module``; the
module maps a float batch ``[B, *input_shape]`` (int64 token ids ``[B, L]`` for text) to logits
``[B, num_classes]``.

Contract with the engine, which keeps parameters as one flat vector and calls modules through
``torch.func.functional_call`` (also under ``vmap``): no BatchNorm and no buffer that training
changes (GroupNorm instead; the only buffers anywhere are the NeoX rotary frequencies, constants
registered non-persistent), no in-place operation on inputs, dropout only as ``nn.Dropout`` modules
(the engine detects dropout by module type to choose ``vmap``'s randomness). Initialisation draws from torch's global RNG, which the engine seeds right before
building the model.
"""
from __future__ import annotations

from typing import Any, Sequence

from torch import nn

from fedhet.core.options import build_options
from fedhet.core.registry import MODELS
from fedhet.models import cnn, cnn5, fedau_cnn, logreg, mlp, neox, pfl_cnn, resnet_gn  # noqa: F401  (registration)

__all__ = ["build_model", "count_parameters"]


def build_model(name: str, input_shape: Sequence[int], num_classes: int, **option_values: Any) -> nn.Module:
    """Build the registered model ``name`` with options validated as the ``[model]`` config section.

    Unknown names and bad option values raise :class:`fedhet.core.options.ConfigError`; shapes the
    architecture cannot take raise :class:`fedhet.models.shapes.ModelShapeError` (a ``ValueError``).
    """
    entry = MODELS.get(name, key="model.name")
    options = build_options(entry.options_cls, option_values, section="model")
    return entry.factory(options, input_shape=tuple(input_shape), num_classes=num_classes)


def count_parameters(module: nn.Module, *, trainable_only: bool = False) -> int:
    """Number of scalar parameters (each shared tensor counted once), i.e. the flat vector's length."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)
