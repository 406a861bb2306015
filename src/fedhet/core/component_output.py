"""Checks on what a component returns to the engine: a tensor of the shape the engine needs.

A solver's ``direction`` or a server aggregator's ``aggregate`` that returns a list, ``None`` or a
tensor of another shape would otherwise fail deep inside torch (``w.add_``, the optimiser) with an
error that reads as a bug in fedhet. A component defined outside fedhet (a user's, registered from
``--module`` or a notebook) gets :class:`ComponentOutputError`, printed as one ``fedhet:`` line
naming the component, the method and what it returned; one of fedhet's own gets a ``TypeError``
(a bug in fedhet, reported as one).
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from fedhet.errors import FedhetError


class ComponentOutputError(FedhetError, ValueError):
    """A user-defined component returned a value of the wrong type or shape."""


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {list(value.shape)}"
    return "None" if value is None else f"a {type(value).__name__}"


def check_tensor_output(component: Any, method: str, value: Any, shape: Sequence[int]) -> None:
    """Raise unless ``value`` is a tensor of ``shape`` (``component.method`` returned it)."""
    if isinstance(value, torch.Tensor) and tuple(value.shape) == tuple(shape):
        return
    cls = type(component)
    module = cls.__module__ or ""
    message = (f"{cls.__qualname__} (module {module}): {method} returned {_describe(value)}, expected a tensor of "
               f"shape {list(shape)}")
    if module.split(".")[0] == "fedhet":
        raise TypeError(message)
    raise ComponentOutputError(message)
