"""Input-shape checks shared by the model factories.

Every factory receives ``input_shape`` (one example, without the batch dimension) and
``num_classes`` from the dataset; a shape the architecture cannot take is a data problem (an image
model on a tabular dataset, say), so it raises :class:`ModelShapeError` naming the model, the shape and
what is allowed: the user's to fix, printed as one ``fedhet:`` line (:mod:`fedhet.errors`).
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from fedhet.errors import FedhetError


class ModelShapeError(FedhetError, ValueError):
    """The dataset's examples or classes do not fit the chosen model."""


def check_num_classes(model: str, num_classes: int) -> int:
    """``num_classes`` as an int, or ModelShapeError unless it is at least 1."""
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ModelShapeError(f"model {model!r}: num_classes = {num_classes!r}; expected an integer >= 1")
    return num_classes


def flat_features(model: str, input_shape: Sequence[int]) -> int:
    """Number of input features once an example of shape ``input_shape`` is flattened."""
    shape = tuple(input_shape)
    if not shape or any(not isinstance(n, int) or n < 1 for n in shape):
        raise ModelShapeError(f"model {model!r}: input_shape = {shape!r}; expected a non-empty tuple of "
                         "positive integers")
    return math.prod(shape)


def image_shape(model: str, input_shape: Sequence[int]) -> tuple[int, int, int]:
    """``(channels, height, width)`` of an image input.

    ``(H, W)`` is read as one channel, so greyscale datasets stored without a channel axis work
    unchanged; the module then reshapes ``[B, H, W]`` to ``[B, 1, H, W]``.
    """
    shape = tuple(input_shape)
    if len(shape) == 2:
        shape = (1, *shape)
    if len(shape) != 3 or any(not isinstance(n, int) or n < 1 for n in shape):
        raise ModelShapeError(f"model {model!r}: input_shape = {tuple(input_shape)!r}; expected an image "
                         "shape (channels, height, width) or (height, width) of positive integers")
    return shape  # type: ignore[return-value]


def check_spatial(model: str, input_shape: Sequence[int], height: int, width: int, needed: str) -> None:
    """ModelShapeError when the feature map left after the convolutions/pools is empty."""
    if height < 1 or width < 1:
        raise ModelShapeError(f"model {model!r}: input_shape = {tuple(input_shape)!r} is too small; the "
                         f"feature map after the convolutions would be {height}x{width} ({needed})")


def check_model_reads_inputs(model_name: str, module: Any, example: Any) -> None:
    """ModelShapeError when ``module`` cannot take one example of integer inputs (token ids).

    The factories check float inputs by shape; token ids reach a model without an embedding (text
    with ``logreg``) only as a dtype error inside the first matrix product, so one example is passed
    through the module once, before any training.
    """
    import torch

    if example.is_floating_point():
        return
    try:
        # fork_rng: a dropout layer's draw here must not move torch's global generator (reproducibility).
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            module(example)
    except (RuntimeError, TypeError, IndexError) as error:
        raise ModelShapeError(
            f"model {model_name!r} cannot read the dataset's inputs (token ids of dtype {example.dtype}, shape "
            f"{list(example.shape[1:])}): {str(error).splitlines()[0] if str(error) else type(error).__name__}; "
            "text needs a model that embeds tokens (model.name = 'neox_classifier')") from None

