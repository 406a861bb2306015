"""Per-batch augmentation and normalisation on tensors (fedhet.data.transforms)."""
import pickle

import pytest
import torch

from fedhet.data.transforms import (
    Compose,
    RandomCrop,
    RandomHorizontalFlip,
    black_fill,
    compose,
    crop_with_offsets,
    horizontal_flip,
    normalize_uint8_images,
    random_crop,
    random_horizontal_flip,
)

MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)


def _batch(batch=4, channels=3, height=6, width=5, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, channels, height, width, generator=generator)


def _generator(seed):
    return torch.Generator().manual_seed(seed)


def _hand_crop(image, oy, ox, padding, fill):
    """Reference: build the padded image channel by channel, then slice it."""
    channels, height, width = image.shape
    padded = torch.empty(channels, height + 2 * padding, width + 2 * padding)
    for c in range(channels):
        padded[c].fill_(fill[c])
        padded[c, padding:padding + height, padding:padding + width] = image[c]
    return padded[:, oy:oy + height, ox:ox + width]


def test_normalize_matches_hand_computation():
    images = torch.tensor([[[[0, 255]], [[51, 102]], [[128, 0]]]], dtype=torch.uint8)  # [1, 3, 1, 2]
    out = normalize_uint8_images(images, MEAN, STD)
    assert out.dtype == torch.float32 and out.shape == (1, 3, 1, 2)
    expected = [[(0 / 255 - MEAN[0]) / STD[0], (1 - MEAN[0]) / STD[0]],
                [(0.2 - MEAN[1]) / STD[1], (0.4 - MEAN[1]) / STD[1]],
                [(128 / 255 - MEAN[2]) / STD[2], (0 - MEAN[2]) / STD[2]]]
    assert torch.allclose(out[0, :, 0, :], torch.tensor(expected), atol=1e-6)


def test_normalize_rejects_mismatched_channels():
    with pytest.raises(ValueError, match="3 channels"):
        normalize_uint8_images(torch.zeros(1, 3, 2, 2, dtype=torch.uint8), (0.5,), (0.5,))


def test_black_fill_is_normalised_zero():
    fill = black_fill(MEAN, STD)
    black = normalize_uint8_images(torch.zeros(1, 3, 1, 1, dtype=torch.uint8), MEAN, STD)
    assert torch.allclose(torch.tensor(fill), black.flatten(), atol=1e-6)


def test_crop_equals_hand_sliced_reference():
    inputs = _batch(batch=3)
    fill = black_fill(MEAN, STD)
    offsets_y, offsets_x = torch.tensor([0, 3, 8]), torch.tensor([8, 5, 1])
    out = crop_with_offsets(inputs, offsets_y, offsets_x, padding=4, fill=fill)
    assert out.shape == inputs.shape
    for b in range(3):
        reference = _hand_crop(inputs[b], int(offsets_y[b]), int(offsets_x[b]), 4, fill)
        assert torch.equal(out[b], reference)


def test_crop_at_offset_padding_is_identity_and_padding_zero_is_identity():
    inputs = _batch()
    centre = torch.full((len(inputs),), 4)
    assert torch.equal(crop_with_offsets(inputs, centre, centre, padding=4, fill=1.5), inputs)
    assert torch.equal(random_crop(padding=0)(inputs, _generator(1)), inputs)
    assert torch.equal(crop_with_offsets(inputs, centre * 0, centre * 0, padding=0), inputs)


def test_random_crop_is_one_of_the_valid_crops_and_deterministic():
    inputs = _batch(batch=8)
    fill = (0.1, -0.2, 0.3)
    crop = random_crop(padding=2, fill=fill)
    first, again = crop(inputs, _generator(7)), crop(inputs, _generator(7))
    assert torch.equal(first, again)
    assert first.shape == inputs.shape
    for b in range(len(inputs)):
        candidates = [_hand_crop(inputs[b], oy, ox, 2, fill) for oy in range(5) for ox in range(5)]
        assert any(torch.equal(first[b], candidate) for candidate in candidates)
    assert not torch.equal(first, crop(inputs, _generator(8)))


def test_random_crop_offsets_are_uniform_over_all_positions():
    # Identical images with distinct pixel values: each output matches exactly one of the 9 crops.
    image = torch.arange(1.0, 10.0).view(1, 3, 3)
    inputs = image.expand(1800, 1, 3, 3).clone()
    out = random_crop(padding=1, fill=-1.0)(inputs, _generator(3))
    candidates = torch.stack([_hand_crop(image, oy, ox, 1, (-1.0,)) for oy in range(3) for ox in range(3)])
    matches = (out[:, None] == candidates[None]).flatten(2).all(-1)  # [B, 9]
    assert torch.equal(matches.sum(1), torch.ones(1800, dtype=torch.int64))
    frequencies = matches.float().mean(0)
    assert torch.all((frequencies - 1 / 9).abs() < 0.04), frequencies


def test_flip_twice_with_forced_mask_is_identity():
    inputs = _batch()
    mask = torch.tensor([True, False, True, False])
    once = horizontal_flip(inputs, mask)
    assert torch.equal(once[0], inputs[0].flip(-1)) and torch.equal(once[1], inputs[1])
    assert torch.equal(horizontal_flip(once, mask), inputs)


def test_random_flip_probability_and_determinism():
    inputs = _batch(batch=4000, channels=1, height=1, width=2)
    flip = random_horizontal_flip(0.5)
    out = flip(inputs, _generator(11))
    assert torch.equal(out, flip(inputs, _generator(11)))
    flipped = torch.all(out == inputs.flip(-1), dim=(1, 2, 3)) & ~torch.all(out == inputs, dim=(1, 2, 3))
    assert abs(flipped.float().mean().item() - 0.5) < 0.04
    assert torch.equal(random_horizontal_flip(1.0)(inputs, _generator(0)), inputs.flip(-1))
    assert torch.equal(random_horizontal_flip(0.0)(inputs, _generator(0)), inputs)


def test_compose_applies_in_order_with_one_generator():
    inputs = _batch()
    always = random_horizontal_flip(1.0)
    assert torch.equal(compose(always, always)(inputs, _generator(0)), inputs)
    pipeline = compose(random_crop(4, fill=black_fill(MEAN, STD)), random_horizontal_flip(0.5))
    generator = _generator(5)
    step_by_step = pipeline.transforms[1](pipeline.transforms[0](inputs, generator), generator)
    assert torch.equal(pipeline(inputs, _generator(5)), step_by_step)


def test_transforms_pickle_and_validate_arguments():
    pipeline = compose(random_crop(4, fill=(0.0, 1.0, 2.0)), random_horizontal_flip(0.3))
    restored = pickle.loads(pickle.dumps(pipeline))
    assert isinstance(restored, Compose) and restored == pipeline
    assert isinstance(restored.transforms[0], RandomCrop) and isinstance(restored.transforms[1], RandomHorizontalFlip)
    with pytest.raises(ValueError, match="padding"):
        random_crop(-1)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        random_horizontal_flip(1.5)
    with pytest.raises(ValueError, match="fill has 2 values for 3 channels"):
        random_crop(1, fill=(0.0, 1.0))(_batch(), _generator(0))
