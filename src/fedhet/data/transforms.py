"""Tensor transforms for image batches: load-time normalisation and per-batch training augmentation.

Augmentations follow the :data:`fedhet.core.dataset.BatchTransform` signature
``(inputs [B, C, H, W], generator) -> inputs [B, C, H, W]``: every random draw comes from the
explicit ``torch.Generator`` the engine passes (seeded per client, round and step), so a run is
repeatable. Each augmentation is vectorised over the batch (index arithmetic, no Python loop over
images) and is a small frozen dataclass, so it pickles (multi-process and Ray backends) and prints.

The papers train CIFAR-like data with torchvision's ``RandomCrop(32, padding=4)`` and
``RandomHorizontalFlip()``. Here inputs are already normalised when augmentation runs, so "pad with
zeros" has to be restated: torchvision pads the raw image with black (0) *before* ``Normalize``, so
the equivalent padding value for normalised inputs is ``(0 - mean) / std`` per channel, which is
what :func:`black_fill` returns and what :func:`fedhet.data.paper_datasets` passes to
:func:`random_crop`. (Padding the normalised tensor with 0 would pad with the *mean* colour instead.)
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import torch

from fedhet.core.dataset import BatchTransform


def normalize_uint8_images(images: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """uint8 images ``[n, C, H, W]`` in 0..255 -> float32 ``(x / 255 - mean[c]) / std[c]``.

    The same rule as torchvision's ``ToTensor()`` followed by ``Normalize(mean, std)``.
    """
    if images.dim() != 4:
        raise ValueError(f"expected images of shape [n, C, H, W], got {tuple(images.shape)}")
    channels = images.shape[1]
    if len(mean) != channels or len(std) != channels:
        raise ValueError(f"mean/std have {len(mean)}/{len(std)} entries for {channels} channels")
    mean_t = torch.tensor(mean, dtype=torch.float32).view(1, channels, 1, 1)
    std_t = torch.tensor(std, dtype=torch.float32).view(1, channels, 1, 1)
    # One float copy, then in-place arithmetic: datasets here reach hundreds of thousands of images.
    out = images.to(torch.float32).div_(255.0)
    return out.sub_(mean_t).div_(std_t)


def black_fill(mean: Sequence[float], std: Sequence[float]) -> tuple[float, ...]:
    """The normalised value of a black pixel per channel, ``(0 - mean) / std``.

    Padding normalised inputs with this value reproduces torchvision's zero padding of the raw image.
    """
    return tuple((0.0 - m) / s for m, s in zip(mean, std))


def _filled_canvas(fill: float | Sequence[float], like: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """A new ``[B, C, height, width]`` tensor like ``like``, channel ``c`` filled with ``fill[c]``.

    Filled on the device with one kernel per channel: building the fill values as a tensor from a
    Python list would be a host-to-device copy, i.e. a GPU sync, on every augmented step."""
    batch, channels = like.shape[:2]
    values = [float(fill)] * channels if isinstance(fill, (int, float)) else [float(v) for v in fill]
    if len(values) != channels:
        raise ValueError(f"fill has {len(values)} values for {channels} channels")
    canvas = like.new_empty(batch, channels, height, width)
    if len(set(values)) == 1:
        return canvas.fill_(values[0])
    for channel, value in enumerate(values):
        canvas[:, channel].fill_(value)
    return canvas


def crop_with_offsets(inputs: torch.Tensor, offsets_y: torch.Tensor, offsets_x: torch.Tensor, *,
                      padding: int, fill: float | Sequence[float] = 0.0) -> torch.Tensor:
    """Pad each image by ``padding`` on every side with ``fill``, then cut an ``H x W`` window.

    Image ``b`` is cut at rows ``offsets_y[b] .. offsets_y[b] + H`` and columns
    ``offsets_x[b] .. offsets_x[b] + W`` of the padded image (offsets in ``0 .. 2 * padding``), so
    offset ``padding`` returns the image unchanged. Vectorised over the batch (see below).
    """
    if inputs.dim() != 4:
        raise ValueError(f"expected inputs of shape [B, C, H, W], got {tuple(inputs.shape)}")
    batch, channels, height, width = inputs.shape
    if padding == 0:
        return inputs
    padded = _filled_canvas(fill, inputs, height + 2 * padding, width + 2 * padding)
    padded[:, :, padding:padding + height, padding:padding + width] = inputs
    # unfold makes a view [B, C, 2p+1, 2p+1, H, W] of every window; moving the two offset dims next
    # to the batch dim lets one advanced index copy each image's window ([C, H, W] blocks), with no
    # per-image Python loop and no host sync (a 4-index gather reads each pixel's offsets separately).
    windows = padded.unfold(2, height, 1).unfold(3, width, 1).permute(0, 2, 3, 1, 4, 5)
    image = torch.arange(batch, device=inputs.device)
    return windows[image, offsets_y.to(inputs.device), offsets_x.to(inputs.device)]


def horizontal_flip(inputs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mirror left-right the images whose ``mask`` entry is true; the others pass unchanged."""
    mask = mask.to(device=inputs.device, dtype=torch.bool).view(-1, *([1] * (inputs.dim() - 1)))
    return torch.where(mask, inputs.flip(-1), inputs)


@dataclasses.dataclass(frozen=True)
class RandomCrop:
    """torchvision's ``RandomCrop(size=(H, W), padding)``: pad, then cut at a uniform random offset."""

    padding: int
    fill: tuple[float, ...] | float = 0.0

    def __call__(self, inputs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        if self.padding == 0:
            return inputs
        batch = inputs.shape[0]
        # Draw on the generator's device (it may differ from the inputs'), then move.
        offsets = torch.randint(0, 2 * self.padding + 1, (2, batch), generator=generator,
                                device=generator.device)
        return crop_with_offsets(inputs, offsets[0], offsets[1], padding=self.padding, fill=self.fill)


@dataclasses.dataclass(frozen=True)
class RandomHorizontalFlip:
    """torchvision's ``RandomHorizontalFlip(p)``: each image mirrored independently with probability p."""

    p: float = 0.5

    def __call__(self, inputs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        draws = torch.rand(inputs.shape[0], generator=generator, device=generator.device)
        return horizontal_flip(inputs, draws < self.p)


@dataclasses.dataclass(frozen=True)
class Compose:
    """Apply ``transforms`` in order, all drawing from the same generator."""

    transforms: tuple[BatchTransform, ...]

    def __call__(self, inputs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        for transform in self.transforms:
            inputs = transform(inputs, generator)
        return inputs


def random_crop(padding: int = 4, fill: float | Sequence[float] = 0.0) -> RandomCrop:
    """A :class:`RandomCrop` keeping the input size; ``fill`` is a scalar or one value per channel.

    For normalised inputs pass ``fill=black_fill(mean, std)`` to match torchvision (see module doc).
    """
    if not isinstance(padding, int) or isinstance(padding, bool) or padding < 0:
        raise ValueError(f"padding = {padding!r}: must be an integer >= 0")
    fill_value = float(fill) if isinstance(fill, (int, float)) else tuple(float(v) for v in fill)
    return RandomCrop(padding=padding, fill=fill_value)


def random_horizontal_flip(p: float = 0.5) -> RandomHorizontalFlip:
    """A :class:`RandomHorizontalFlip` with flip probability ``p`` in [0, 1]."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p = {p!r}: must be in [0, 1]")
    return RandomHorizontalFlip(p=float(p))


def compose(*transforms: BatchTransform) -> Compose:
    """Chain batch transforms left to right."""
    return Compose(transforms=tuple(transforms))
