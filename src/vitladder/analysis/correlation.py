"""Spearman's rank correlation in torch (scipy is not a dependency), batched over leading dimensions: Pearson's
correlation of the ranks, ties sharing the mean of the ranks they span (as ``scipy.stats.spearmanr``); NaN for a
sample with no spread (all values tied)."""

from __future__ import annotations

import torch
from torch import Tensor


def average_ranks(values: Tensor) -> Tensor:
    """1-based ranks along the last dimension, ties sharing the mean of their ranks, ``(..., n)``: a value's ties span
    the sorted positions ``[left, right)``, found by binary search (no ``(n, n)`` comparison)."""
    values = values.double().contiguous()  # searchsorted copies a strided (e.g. expanded) input anyway
    ordered = values.sort(dim=-1).values  # (..., n)
    left = torch.searchsorted(ordered, values, side="left")  # (..., n) values strictly below
    right = torch.searchsorted(ordered, values, side="right")  # (..., n) values below or equal
    return (left + right + 1).double() / 2


def spearman(x: Tensor, y: Tensor) -> Tensor:
    """Spearman's rho between ``x`` and ``y`` along the last dimension, ``(...)`` in float64 (NaN without spread)."""
    if x.shape[-1] != y.shape[-1] or x.shape[-1] < 2:
        raise ValueError(f"spearman needs two samples of the same length >= 2, got {tuple(x.shape)}, {tuple(y.shape)}")
    rx, ry = torch.broadcast_tensors(average_ranks(x), average_ranks(y))  # (..., n)
    rx = rx - rx.mean(dim=-1, keepdim=True)
    ry = ry - ry.mean(dim=-1, keepdim=True)
    cov = (rx * ry).sum(dim=-1)  # (...)
    scale = (rx.square().sum(dim=-1) * ry.square().sum(dim=-1)).sqrt()  # (...)
    return torch.where(scale > 0, cov / scale.clamp_min(1e-300), torch.nan)
