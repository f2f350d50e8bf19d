"""``data=synthetic``: stripes of 2 orientations x 5 spatial frequencies, learnable in a CPU minute; no download.
Phase, contrast, tint, background and noise follow the same laws in every class: only the pattern tells them apart.
Vertical and horizontal stripes survive the ladder's flip and crop (a 30-degree grating would flip to 150 degrees),
and telling 2 from 3.5 cycles takes more than one 4-px patch: the model has to relate patches."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from omegaconf import DictConfig

from vitladder.config_schema import DataConfig, at_least, setting
from vitladder.data.sources import SYNTHETIC, ImageSplits

ORIENTATIONS_DEG = {"grating_0deg": 0.0, "grating_90deg": 90.0}
CYCLES = {"2cyc": 2.0, "3.5cyc": 3.5, "5cyc": 5.0, "7cyc": 7.0, "10cyc": 10.0}  # per image width
CLASSES = tuple(f"{o}_{c}" for c in CYCLES for o in ORIENTATIONS_DEG)


@dataclass
class Config(DataConfig):
    """data=synthetic's keys (values: conf/data/synthetic.yaml)."""

    num_train: int = setting(valid=at_least(1, "10000"))
    num_test: int = setting(valid=at_least(1, "2000"))


def load(data_cfg: DictConfig) -> ImageSplits:
    return make_synthetic(int(data_cfg.num_train), int(data_cfg.num_test), seed=int(data_cfg.get("seed", 0)))


def _images(labels: torch.Tensor, image_size: int, generator: torch.Generator) -> torch.Tensor:
    n = labels.numel()
    angle = torch.tensor(list(ORIENTATIONS_DEG.values())).deg2rad()[labels % len(ORIENTATIONS_DEG)]  # (N,)
    cycles = torch.tensor(list(CYCLES.values()))[labels // len(ORIENTATIONS_DEG)]  # (N,)
    phase = torch.rand(n, generator=generator) * 2 * math.pi  # (N,)
    contrast = 0.2 + 0.25 * torch.rand(n, generator=generator)  # (N,)
    tint = 0.3 + 0.7 * torch.rand(n, 3, generator=generator)  # (N, 3) how strongly each channel shows the stripes
    background = 0.3 + 0.4 * torch.rand(n, 3, generator=generator)  # (N, 3)
    coords = (torch.arange(image_size, dtype=torch.float32) + 0.5) / image_size  # (S,) in [0, 1)
    y, x = torch.meshgrid(coords, coords, indexing="ij")  # (S, S)
    along = x * angle.cos()[:, None, None] + y * angle.sin()[:, None, None]  # (N, S, S) in image widths
    wave = torch.sin(2 * math.pi * cycles[:, None, None] * along + phase[:, None, None])  # (N, S, S)
    images = background[:, :, None, None] + (contrast[:, None] * tint)[:, :, None, None] * wave[:, None]
    images = images + 0.1 * torch.randn(images.shape, generator=generator)  # (N, 3, S, S) pixel noise
    return (images.clamp(0, 1) * 255).round().to(torch.uint8)


def make_synthetic(num_train: int, num_test: int, seed: int = 0, image_size: int = 32) -> ImageSplits:
    """Balanced classes (the labels cycle through them, then are shuffled), deterministic given ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    tensors = []
    for n in (num_train, num_test):
        labels = (torch.arange(n, dtype=torch.int64) % len(CLASSES))[torch.randperm(n, generator=generator)]
        tensors += [_images(labels, image_size, generator), labels]
    return ImageSplits(*tensors, CLASSES, origin=SYNTHETIC)
