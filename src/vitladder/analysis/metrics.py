"""What attention heads look at: pure tensor maths on attention ``A[b, h, q, k]`` ``(B, H, T, T)``, rows summing to 1,
over ``T = 1 + N`` tokens (token 0 CLS, then the patches of a ``g x g`` grid, row-major). docs/design.md §4: per head,
averaged over the batch and the ``N`` patch queries (the CLS query row left out). ``METRICS`` declares each per-head
metric once; every output loops over it, so a new metric is one function and one entry.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

import torch
from torch import Tensor

ClsConvention = Literal["renormalise", "drop"]


def grid_from_tokens(num_tokens: int) -> int:
    """Side ``g`` of the patch grid for ``T = 1 + g*g`` tokens (CLS + patches)."""
    num_patches = num_tokens - 1
    grid = math.isqrt(max(num_patches, 0))
    if num_patches < 1 or grid * grid != num_patches:
        raise ValueError(
            f"attention over {num_tokens} tokens does not fit 1 CLS token + a square grid "
            f"of patches: {num_patches} patches is not a perfect square"
        )
    return grid


def patch_centers(grid: int, patch_px: float) -> Tensor:
    """Pixel centres ``(x, y) = ((col + 0.5) * p, (row + 0.5) * p)`` of the patches, ``(N, 2)``."""
    index = torch.arange(grid * grid)  # (N,) row-major
    row, col = index // grid, index % grid
    return torch.stack([(col + 0.5) * patch_px, (row + 0.5) * patch_px], dim=1).float()  # (N, 2)


def patch_distances(grid: int, patch_px: float) -> Tensor:
    """Euclidean pixel distances between every pair of patch centres, ``(N, N)``."""
    centers = patch_centers(grid, patch_px).double()  # (N, 2); float64 so 0 stays exactly 0
    return torch.cdist(centers, centers).float()  # (N, N)


def _check_attention(attn: Tensor) -> int:
    """The grid side of a ``(B, H, T, T)`` attention, which is checked."""
    if attn.dim() != 4 or attn.shape[-1] != attn.shape[-2]:
        raise ValueError(f"expected attention of shape (B, H, T, T), got {tuple(attn.shape)}")
    return grid_from_tokens(attn.shape[-1])


def mean_attention_distance(attn: Tensor, patch_px: float, cls_convention: ClsConvention = "renormalise") -> Tensor:
    """Mean attention distance per head in pixels, ``(H,)``. ``"renormalise"`` (the project's definition) rescales each
    patch query's attention over the patch keys to sum to 1 (a query wholly on CLS counts 0); ``"drop"`` (published
    code's convention) uses ``A[q, 1:]`` as is: the renormalised value times ``1 - A[q, 0]`` per query."""
    grid = _check_attention(attn)
    if cls_convention not in ("renormalise", "drop"):
        raise ValueError(f"cls_convention must be 'renormalise' or 'drop', got {cls_convention!r}")
    patch_attn = attn[:, :, 1:, 1:].float()  # (B, H, N, N) patch queries -> patch keys
    dist = patch_distances(grid, patch_px).to(patch_attn.device)  # (N, N)
    # sum_k A[q, k] d[q, k] without a (B, H, N, N) temporary: on the CPU, allocating one costs more
    # than the arithmetic. Renormalising the row first equals dividing this sum by the row's mass.
    per_query = torch.einsum("bhqk,qk->bhq", patch_attn, dist)  # (B, H, N)
    if cls_convention == "renormalise":
        mass = patch_attn.sum(dim=-1)  # (B, H, N)
        per_query = per_query / mass.clamp_min(torch.finfo(patch_attn.dtype).tiny)
    return per_query.mean(dim=(0, 2))  # (H,)


def attention_entropy(attn: Tensor) -> Tensor:
    """Entropy per head in nats over all ``T`` keys (``0 ln 0 = 0``), ``(H,)``."""
    _check_attention(attn)
    rows = attn[:, :, 1:, :].float()  # (B, H, N, T) patch queries, every key
    # ln of a clamped copy, then multiplied in place: one temporary, and 0 * ln(tiny) = 0 exactly
    # (torch.special.xlogy gives the same numbers, several times slower on the CPU).
    log_rows = rows.clamp_min(torch.finfo(rows.dtype).tiny).log_()  # (B, H, N, T)
    entropy = -log_rows.mul_(rows).sum(dim=-1)  # (B, H, N)
    return entropy.mean(dim=(0, 2))  # (H,)


def cls_share(attn: Tensor) -> Tensor:
    """Attention that patch queries give to the CLS token, per head, ``(H,)``."""
    _check_attention(attn)
    return attn[:, :, 1:, 0].float().mean(dim=(0, 2))  # (B, H, N) -> (H,)


def attention_rollout(attns: list[Tensor]) -> Tensor:
    """Attention rollout (Abnar & Zuidema 2020) of layers first to last: the CLS row over the patches, ``(B, N)``."""
    if not attns:
        raise ValueError("attention rollout needs at least one layer of attention")
    _check_attention(attns[0])
    eye = torch.eye(attns[0].shape[-1], device=attns[0].device)  # (T, T)
    rollout = eye
    for attn in attns:
        mixed = 0.5 * attn.float().mean(dim=1) + 0.5 * eye  # (B, T, T): the residual path
        rollout = (mixed / mixed.sum(dim=-1, keepdim=True)) @ rollout  # rows renormalised; later layers on the left
    return rollout[:, 0, 1:]  # (B, N)


def uniform_distance(grid: int, patch_px: float) -> float:
    """Mean attention distance of uniform attention: mean over all pairs, self included (px)."""
    return patch_distances(grid, patch_px).double().mean().item()


# --- the per-head metrics, declared once -------------------------------------------------------

Shown = Literal["csv", "wandb", "report", "figures"]
SHOWN = get_args(Shown)  # each level adds to the one before it


@dataclass(frozen=True)
class HeadMetric:
    """One per-head metric: how it is computed, and the one name every output uses for it. ``shown``, each level adding
    to the one before: ``"csv"`` heads.csv and layers.csv; ``"wandb"`` the W&B runs' by-layer scalars, tables and
    charts; ``"report"`` layer 1 in done.json and the ladder report; ``"figures"`` tracked during training
    (tracking.csv, ``track/``, locality.png, tracking_by_epoch.png), ``<short>.png`` and ``<short>_by_layer.png``."""

    name: str  # CSV column, W&B key and table column, with its unit: "distance_px"
    fn: Callable[[Tensor, float], Tensor]  # (attention (B, H, T, T), patch px) -> per head (H,)
    label: str  # what it measures, for axes and titles: "mean attention distance"
    unit: str  # "px", "nats"; "" for a share
    short: str  # one word for file names and titles: distance.png, "distance per head"
    digits: int  # decimals in the report's table
    shown: Shown = "figures"
    uniform: Callable[[int, float], float] | None = None  # its value for uniform attention (grid, patch px)

    @property
    def axis_label(self) -> str:
        return f"{self.label} ({self.unit})" if self.unit else self.label


def declared(at_least: Shown = "csv") -> tuple[HeadMetric, ...]:
    """The metrics of METRICS shown at least as far as ``at_least``, in declaration order (read when called)."""
    level = SHOWN.index(at_least)
    return tuple(m for m in METRICS if SHOWN.index(m.shown) >= level)


METRICS: tuple[HeadMetric, ...] = (
    HeadMetric(
        "distance_px",
        lambda attn, px: mean_attention_distance(attn, px, "renormalise"),
        "mean attention distance",
        "px",
        "distance",
        digits=1,
        uniform=uniform_distance,
    ),
    HeadMetric(
        "entropy_nats",
        lambda attn, px: attention_entropy(attn),
        "entropy",
        "nats",
        "entropy",
        digits=2,
        uniform=lambda grid, px: math.log(1 + grid * grid),  # ln T
    ),
    HeadMetric("cls_share", lambda attn, px: cls_share(attn), "CLS share", "", "cls_share", digits=3, shown="wandb"),
    # The other reading of the article's distance, common in published code: CLS dropped, not renormalised. Uniform
    # attention holds N / (N + 1) of itself on the patch keys (16.29 px for 8x8 patches of 4 px).
    HeadMetric(
        "distance_drop_px",
        lambda attn, px: mean_attention_distance(attn, px, "drop"),
        "mean attention distance, CLS dropped",
        "px",
        "distance_drop",
        digits=1,
        shown="report",
        uniform=lambda grid, px: uniform_distance(grid, px) * (grid * grid) / (grid * grid + 1),
    ),
)
