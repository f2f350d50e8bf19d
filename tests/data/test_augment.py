"""Batched augmentation: per-image random crops and flips, and normalisation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from vitladder.data.augment import normalize, random_crop, random_flip
from vitladder.data.sources.cifar10 import STATS as CIFAR10_STATS

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def position_images(b: int, h: int = 32, w: int = 32, device: str = "cpu") -> torch.Tensor:
    """(B, 2, H, W) int32: channel 0 holds 1 + row + 100 * image, channel 1 holds 1 + column.

    Every pixel names where it came from, so a crop's offset can be read back from its output,
    and the zero padding (0) never collides with a real pixel (>= 1).
    """
    rows = torch.arange(h, device=device)[:, None].expand(h, w) + 1
    cols = torch.arange(w, device=device)[None, :].expand(h, w) + 1
    image_id = torch.arange(b, device=device)[:, None, None] * 100
    return torch.stack([rows + image_id, cols.expand(b, h, w)], dim=1).int()


@pytest.mark.parametrize("device", DEVICES)
def test_random_crop_shifts_each_image_by_its_own_offset(device: str) -> None:
    padding, b = 4, 64
    images = position_images(b, device=device)
    out = random_crop(images, padding, torch.Generator(device=device).manual_seed(0))
    assert out.shape == images.shape and out.dtype == images.dtype and out.device == images.device

    padded = F.pad(images, (padding,) * 4)
    offsets = set()
    for i in range(b):
        # The centre pixel is always inside the image: it tells where the crop window started.
        dy = int(out[i, 0, 16, 16]) - 100 * i - 1 - 16 + padding
        dx = int(out[i, 1, 16, 16]) - 1 - 16 + padding
        assert 0 <= dy <= 2 * padding and 0 <= dx <= 2 * padding
        # ...and the whole output is exactly that window of the zero-padded image.
        assert torch.equal(out[i], padded[i, :, dy : dy + 32, dx : dx + 32])
        offsets.add((dy, dx))
    assert len(offsets) > 20  # per-image offsets, not one offset for the whole batch
    assert {dy for dy, _ in offsets} == set(range(2 * padding + 1))  # the full range is drawn


def test_random_crop_known_offset_moves_content() -> None:
    # padding 1 allows offsets 0..2; find a seed that draws dy=0, dx=2 for the single image.
    images = position_images(1, 4, 4)
    for seed in range(100):
        out = random_crop(images, 1, torch.Generator().manual_seed(seed))
        if int(out[0, 0, 1, 1]) == 1 and int(out[0, 1, 1, 1]) == 3:  # came from row 0, column 2
            break
    # Offset (0, 2) with padding 1: content moves down one row and left one column.
    assert out[0, 0].tolist() == [[0, 0, 0, 0], [1, 1, 1, 0], [2, 2, 2, 0], [3, 3, 3, 0]]
    assert out[0, 1].tolist() == [[0, 0, 0, 0], [2, 3, 4, 0], [2, 3, 4, 0], [2, 3, 4, 0]]


def test_random_crop_is_deterministic_and_dtype_preserving() -> None:
    images = torch.randint(0, 256, (16, 3, 32, 32), dtype=torch.uint8)
    a = random_crop(images, 4, torch.Generator().manual_seed(1))
    b = random_crop(images, 4, torch.Generator().manual_seed(1))
    assert a.dtype == torch.uint8 and torch.equal(a, b)
    assert torch.equal(random_crop(images, 0, torch.Generator()), images)
    floats = images.float()
    assert torch.equal(random_crop(floats, 4, torch.Generator().manual_seed(1)), a.float())


@pytest.mark.parametrize("device", DEVICES)
def test_random_flip_mirrors_about_half_the_images_exactly(device: str) -> None:
    images = torch.randint(0, 256, (200, 3, 8, 8), dtype=torch.uint8, device=device)
    out = random_flip(images, torch.Generator(device=device).manual_seed(0))
    same = (out == images).flatten(1).all(1)
    mirrored = (out == images.flip(-1)).flatten(1).all(1)
    assert bool((same | mirrored).all())  # every image is itself or its exact mirror
    assert 60 < int(mirrored.sum()) < 140
    assert torch.equal(out[2, :, :, 0], images[2, :, :, -1]) or torch.equal(out[2], images[2])


def test_normalize_values() -> None:
    images = torch.tensor([0, 255, 128], dtype=torch.uint8)[:, None, None, None].expand(3, 3, 2, 2)
    out = normalize(images, CIFAR10_STATS.mean, CIFAR10_STATS.std)
    assert out.dtype == torch.float32 and out.shape == (3, 3, 2, 2)
    mean, std = torch.tensor(CIFAR10_STATS.mean), torch.tensor(CIFAR10_STATS.std)
    assert torch.allclose(out[0, :, 0, 0], -mean / std, atol=1e-5)
    assert torch.allclose(out[1, :, 0, 0], (1 - mean) / std, atol=1e-5)
    assert torch.allclose(out[2, :, 1, 1], (128 / 255 - mean) / std, atol=1e-5)
    custom = normalize(images, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
    assert torch.allclose(custom[:, 0, 0, 0], torch.tensor([-1.0, 1.0, 128 / 127.5 - 1]), atol=1e-5)
    with pytest.raises(TypeError, match=r"^normalize expects uint8 images, got torch\.float32$"):
        normalize(images.float(), CIFAR10_STATS.mean, CIFAR10_STATS.std)  # normalised twice: the caller's mistake
