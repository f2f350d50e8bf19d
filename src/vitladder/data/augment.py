"""Augmentation and normalisation as batched tensor ops on the images' device (airbench style): each image draws its
own randomness from a generator on that device, so a batch takes a few kernel launches and no host sync."""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor


def random_crop(images: Tensor, padding: int, generator: torch.Generator) -> Tensor:
    """Zero-pad by ``padding`` then crop back to (H, W), each image at its own offset in [0, 2*padding]; padding 0
    draws nothing, so the flips that follow are those of a recipe without the crop."""
    if padding <= 0:
        return images
    b, c, h, w = images.shape
    padded = F.pad(images, (padding, padding, padding, padding))  # (B, C, H+2p, W+2p), zeros
    dy = torch.randint(0, 2 * padding + 1, (b,), generator=generator, device=images.device)  # (B,)
    dx = torch.randint(0, 2 * padding + 1, (b,), generator=generator, device=images.device)  # (B,)
    rows = dy[:, None] + torch.arange(h, device=images.device)  # (B, H) source row of each output row
    cols = dx[:, None] + torch.arange(w, device=images.device)  # (B, W) source column of each output column
    picked = padded.gather(2, rows[:, None, :, None].expand(b, c, h, w + 2 * padding))  # (B, C, H, W+2p)
    return picked.gather(3, cols[:, None, None, :].expand(b, c, h, w))  # (B, C, H, W)


def random_flip(images: Tensor, generator: torch.Generator) -> Tensor:
    flip = torch.rand(images.shape[0], generator=generator, device=images.device) < 0.5  # (B,)
    return torch.where(flip[:, None, None, None], images.flip(-1), images)


def normalize(images_u8: Tensor, mean: tuple[float, ...], std: tuple[float, ...]) -> Tensor:
    """(B, C, H, W) uint8 -> float32 ``(x / 255 - mean) / std`` per channel, with the run's statistics (stats.py)."""
    if images_u8.dtype != torch.uint8:
        raise TypeError(f"normalize expects uint8 images, got {images_u8.dtype}")
    scale, shift = _affine(tuple(mean), tuple(std), images_u8.device)
    return images_u8.float() * scale - shift


@functools.lru_cache(maxsize=8)  # one host-to-device copy per device, not one per batch
def _affine(mean: tuple[float, ...], std: tuple[float, ...], device: torch.device) -> tuple[Tensor, Tensor]:
    mean_t = torch.tensor(mean, dtype=torch.float32, device=device)[:, None, None]  # (C, 1, 1)
    std_t = torch.tensor(std, dtype=torch.float32, device=device)[:, None, None]  # (C, 1, 1)
    return 1.0 / (255.0 * std_t), mean_t / std_t
