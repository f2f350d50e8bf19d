"""Edges of the batched augmentation: crops shift by every offset in both directions, no padding means
no draw from the generator (the flips that follow stay the same), and the ops run on the images'
device (the meta device stands in for a GPU)."""

from __future__ import annotations

import torch

from vitladder.data.augment import random_crop, random_flip


def test_crop_offsets_cover_the_full_range_in_both_directions() -> None:
    padding, b = 2, 200
    # Pixel (r, c) holds 1 + r + 10 c: the top-left output pixel tells where the window started (0: padding).
    rows, cols = torch.meshgrid(torch.arange(8), torch.arange(8), indexing="ij")
    images = (1 + rows + 10 * cols).int().expand(b, 1, 8, 8)
    out = random_crop(images, padding, torch.Generator().manual_seed(0))  # (B, 1, 8, 8)
    centre = out[:, 0, 4, 4]  # always inside the image: 1 + (4 + dy - p) + 10 (4 + dx - p)
    dy, dx = (centre - 1) % 10 - 4 + padding, (centre - 1) // 10 - 4 + padding
    assert set(dy.tolist()) == set(dx.tolist()) == set(range(2 * padding + 1))


def test_no_padding_draws_nothing_from_the_generator() -> None:
    images = torch.randint(0, 256, (6, 3, 8, 8), dtype=torch.uint8)
    generator = torch.Generator().manual_seed(3)
    state = generator.get_state()
    assert torch.equal(random_crop(images, 0, generator), images)
    assert torch.equal(generator.get_state(), state)  # so a flip-only recipe flips as if no crop existed


def test_crop_and_flip_run_on_the_images_device() -> None:
    images = torch.zeros(4, 3, 8, 8, dtype=torch.uint8, device="meta")
    assert random_crop(images, 2, torch.Generator()).device.type == "meta"
    assert random_flip(images, torch.Generator()).device.type == "meta"
