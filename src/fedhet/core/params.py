"""One flat parameter vector per model.

fedhet represents a model's parameters as one contiguous vector ``x`` of length ``d`` (a cohort as a
``[K, d]`` matrix, per-client memories as ``[N, d]``). :class:`ParamSpec` maps between the flat
vector and the module's named parameters:

- :meth:`ParamSpec.views` gives named views of a ``[..., d]`` tensor, for
  ``torch.func.functional_call`` (and ``vmap`` over leading dimensions);
- :func:`bind_flat` makes a module's parameters *be* views of a flat vector and their ``.grad``
  views of a flat gradient buffer, so a sequential training step is one backward pass into the
  flat gradient and one ``w.add_(g)`` kernel: no per-client model copies, no parameter loops.
"""
from __future__ import annotations

import dataclasses
import math

import torch
from torch import nn


@dataclasses.dataclass(frozen=True)
class ParamSpec:
    """Names, shapes and offsets of a module's parameters within the flat vector."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    offsets: tuple[int, ...]
    dim: int

    @classmethod
    def from_module(cls, module: nn.Module) -> "ParamSpec":
        names, shapes, offsets = [], [], []
        offset = 0
        for name, param in module.named_parameters():
            names.append(name)
            shapes.append(tuple(param.shape))
            offsets.append(offset)
            offset += param.numel()
        if not names:
            raise ValueError("the model has no parameters")
        return cls(tuple(names), tuple(shapes), tuple(offsets), offset)

    def numel(self, index: int) -> int:
        return math.prod(self.shapes[index])

    def flatten(self, module: nn.Module, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The module's parameters concatenated in registration order (a new tensor)."""
        params = dict(module.named_parameters())
        return torch.cat([params[n].detach().reshape(-1) for n in self.names]).to(dtype or params[self.names[0]].dtype)

    def views(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Named views of ``flat`` (shape ``[..., d]``) with shapes ``[..., *param_shape]``."""
        if flat.shape[-1] != self.dim:
            raise ValueError(f"flat vector has length {flat.shape[-1]}, the model has {self.dim} parameters")
        lead = flat.shape[:-1]
        return {name: flat[..., off:off + math.prod(shape)].reshape(*lead, *shape)
                for name, shape, off in zip(self.names, self.shapes, self.offsets)}

    def slices(self, names: tuple[str, ...] | list[str]) -> torch.Tensor:
        """Flat indices of the named parameters (e.g. "only the last layers"), as int64."""
        unknown = [n for n in names if n not in self.names]
        if unknown:
            raise ValueError(f"unknown parameter names {unknown}; the model has: {', '.join(self.names)}")
        parts = [torch.arange(self.offsets[self.names.index(n)],
                              self.offsets[self.names.index(n)] + self.numel(self.names.index(n)))
                 for n in names]
        return torch.cat(parts)


def bind_flat(module: nn.Module, spec: ParamSpec, flat: torch.Tensor, grad: torch.Tensor) -> None:
    """Make ``module``'s parameters views into ``flat`` and their gradients views into ``grad``.

    After binding, ``loss.backward()`` accumulates straight into ``grad`` (autograd adds into an
    existing ``.grad`` in place), and writing ``flat`` changes the module. Zero ``grad`` before each
    backward pass. ``flat`` and ``grad`` must be contiguous 1-D tensors of length ``spec.dim``.
    """
    if flat.dim() != 1 or flat.shape[0] != spec.dim or grad.shape != flat.shape:
        raise ValueError("bind_flat needs 1-D flat and grad tensors of the model's length")
    params = dict(module.named_parameters())
    for name, views_flat, views_grad in zip(spec.names, spec.views(flat).values(), spec.views(grad).values()):
        param = params[name]
        param.data = views_flat
        param.grad = views_grad
