"""Per-channel mean and standard deviation of uint8 images: the normalisation a model is trained with, the source's
(CIFAR-10's) or the training split's. They travel with the model, so everything after training normalises as it did."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class ChannelStats:
    """``(x / 255 - mean) / std`` per channel, for x in [0, 255]."""

    mean: tuple[float, ...]
    std: tuple[float, ...]

    def to_dict(self) -> dict[str, list[float]]:
        return {"mean": list(self.mean), "std": list(self.std)}

    @classmethod
    def from_dict(cls, raw: object) -> ChannelStats:
        """From ``to_dict``'s form, read from anyone's file: a ValueError unless 3 finite means and 3 stds > 0."""
        if not isinstance(raw, Mapping):
            raise ValueError("normalisation is not a mapping of mean and std")
        for name, low in (("mean", -math.inf), ("std", 0.0)):
            values = raw.get(name)
            ok = isinstance(values, (list, tuple)) and len(values) == 3
            ok = ok and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
            if not ok or not all(math.isfinite(v) and v > low for v in values):
                raise ValueError(f"normalisation {name} is not 3 finite numbers" + (" above 0" if low == 0 else ""))
        return cls(tuple(map(float, raw["mean"])), tuple(map(float, raw["std"])))


def channel_stats(images_u8: Tensor, chunk: int = 4096) -> ChannelStats:
    """Mean and (population) standard deviation of each channel of ``images_u8`` (N, C, H, W), in [0, 1], summed in
    float64 over ``chunk`` images at a time: bounded memory, and 50,000 images sum without float32's rounding."""
    if images_u8.dtype != torch.uint8 or images_u8.ndim != 4 or len(images_u8) == 0:
        raise ValueError(f"expected (N, C, H, W) uint8 images with N > 0, got {tuple(images_u8.shape)}")
    total, squares = torch.zeros(2, images_u8.shape[1], dtype=torch.float64)  # (C,) each: sums of x and of x^2
    for start in range(0, len(images_u8), chunk):
        x = images_u8[start : start + chunk].to("cpu", torch.float64) / 255  # (B, C, H, W)
        total, squares = total + x.sum(dim=(0, 2, 3)), squares + x.square().sum(dim=(0, 2, 3))
    count = images_u8.numel() // images_u8.shape[1]
    mean = total / count  # (C,)
    std = (squares / count - mean.square()).clamp_min(0).sqrt()  # (C,)
    # A channel that never varies (a blank set) would divide by zero: leave its scale alone.
    std = torch.where(std > 1e-6, std, torch.ones_like(std))
    return ChannelStats(tuple(mean.tolist()), tuple(std.tolist()))
