"""Normalisation runs where the images are: its constants are built on the images' device, once."""

from __future__ import annotations

import torch

from vitladder.data.augment import normalize
from vitladder.data.sources.cifar10 import STATS as CIFAR10_STATS


def test_normalisation_stays_on_the_images_device() -> None:
    # The meta device stands in for a GPU: constants built on the CPU would not combine with it.
    images = torch.zeros(2, 3, 4, 4, dtype=torch.uint8, device="meta")
    out = normalize(images, CIFAR10_STATS.mean, CIFAR10_STATS.std)
    assert out.device.type == "meta" and out.dtype == torch.float32 and out.shape == images.shape


def test_normalisation_is_exactly_the_per_channel_affine_map() -> None:
    images = torch.arange(256, dtype=torch.uint8).repeat(3, 1)[None, :, :, None]  # (1, 3, 256, 1): every value
    mean, std = torch.tensor(CIFAR10_STATS.mean)[:, None, None], torch.tensor(CIFAR10_STATS.std)[:, None, None]
    expected = (images.double() / 255 - mean.double()) / std.double()
    assert torch.allclose(
        normalize(images, CIFAR10_STATS.mean, CIFAR10_STATS.std).double(), expected, atol=1e-6, rtol=0
    )
    assert normalize(images, CIFAR10_STATS.mean, CIFAR10_STATS.std).dtype == torch.float32
