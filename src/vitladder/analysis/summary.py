"""One model's attention, summarised: every declared per-head metric (``metrics.METRICS``); and one example image's
CLS maps and rollout (``example_attention``, the cls_attention probe's).

``analyse`` streams images through ``capture_attention`` batch by batch. Each layer's
``(B, H, T, T)`` map is reduced to per-head numbers inside the capture hook, so memory stays at
one batch of one layer however many images are analysed. Per-head values are weighted by batch
size, so the result does not depend on ``batch_size``. Layer values are the mean of a layer's
heads (DESIGN.md section 4).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from vitladder.analysis.capture import capture_attention
from vitladder.analysis.metrics import (
    HeadMetric,
    attention_entropy,
    attention_rollout,
    declared,
    grid_from_tokens,
    mean_attention_distance,
)
from vitladder.data.augment import normalize
from vitladder.data.stats import ChannelStats

__all__ = [
    "AttentionSummary",
    "ExampleAttention",
    "analyse",
    "example_attention",
    "head_metrics",
    "headline_layer",
    "model_inputs",
    "query_metrics",
]

HEADLINE_LAYER = 1  # "layer 1": the second block, where the article reads locality (docs/design.md §4)


def headline_layer(num_layers: int) -> int:
    """The index of the layer reported as "layer 1"; a one-layer model reports its only layer."""
    return min(HEADLINE_LAYER, num_layers - 1)


def head_metrics(attn: Tensor, patch_px: float, metrics: Sequence[HeadMetric] | None = None) -> Tensor:
    """The per-head numbers of one layer's ``(B, H, T, T)`` attention, ``(M, H)``, in ``metrics`` order
    (default: every declared metric)."""
    return torch.stack([metric.fn(attn, patch_px) for metric in metrics or declared()])  # (M, H)


def query_metrics(row: Tensor, grid: int, patch_px: float, query: int) -> tuple[float, float]:
    """(distance px, entropy nats) of ONE patch query's attention ``row`` over the ``N`` patches (no CLS).

    Computed with metrics.py: a ``(1, 1, T, T)`` map whose only non-zero row is the query's
    (CLS weight 0) averages to ``value / N`` over the ``N`` queries, as empty rows count 0.
    """
    n = grid * grid
    attn = torch.zeros(1, 1, n + 1, n + 1)  # (1, 1, T, T)
    attn[0, 0, 1 + query, 1:] = row
    distance = mean_attention_distance(attn, patch_px, "drop").item() * n
    entropy = attention_entropy(attn).item() * n
    return distance, entropy


@dataclass(frozen=True)
class ExampleAttention:
    """One image's CLS attention in every layer and head."""

    index: int  # position among the images analysed
    image: Tensor  # (3, H_px, W_px) uint8, CPU
    label: int | None  # true class index when known
    predicted: int  # the model's class index
    cls_maps: Tensor  # (L, H, N): CLS query's attention over the N patches
    rollout: Tensor  # (N,): attention rollout through every layer
    rollout_by_layer: Tensor  # (L, N): rollout through layers 0..l


@dataclass(frozen=True)
class AttentionSummary:
    heads: Mapping[str, Tensor]  # metric name (declared()) -> per head (L, H)
    patch_px: int
    grid: int
    num_images: int
    uniform: Mapping[str, float]  # metric name -> its value for uniform attention, where it declares one

    @property
    def layers(self) -> dict[str, Tensor]:
        """Per-layer means (of each layer's heads), ``(L,)`` each."""
        return {name: value.mean(dim=-1) for name, value in self.heads.items()}

    @property
    def num_layers(self) -> int:
        return next(iter(self.heads.values())).shape[0]

    @property
    def num_heads(self) -> int:
        return next(iter(self.heads.values())).shape[1]


def model_inputs(model: nn.Module, images_u8: Tensor, stats: ChannelStats) -> Tensor:
    """Normalised float images on the model's device, in its parameters' dtype (bf16-true models too)."""
    param = next(model.parameters())
    images = images_u8.to(param.device, non_blocking=True)
    return normalize(images, stats.mean, stats.std).to(param.dtype)  # (B, 3, H, W)


def example_attention(
    model: nn.Module, images_u8: Tensor, labels: Tensor | None, index: int, stats: ChannelStats
) -> ExampleAttention:
    image = images_u8[index : index + 1]  # (1, 3, H, W)
    logits, maps = capture_attention(model, model_inputs(model, image, stats))  # maps: [(1, H, T, T)] * L
    rollouts = torch.cat([attention_rollout(maps[: layer + 1]) for layer in range(len(maps))])  # (L, N)
    return ExampleAttention(
        index=index,
        image=image[0].cpu(),
        label=None if labels is None else int(labels[index]),
        predicted=int(logits.argmax(dim=-1)[0]),
        cls_maps=torch.stack([m[0, :, 0, 1:] for m in maps]).cpu(),  # (L, H, N)
        rollout=rollouts[-1].cpu(),
        rollout_by_layer=rollouts.cpu(),
    )


def analyse(
    model: nn.Module,
    images_u8: Tensor,
    batch_size: int,
    patch_px: int,
    stats: ChannelStats,
) -> AttentionSummary:
    """Summarise ``model``'s attention over ``images_u8`` ``(N, 3, H, W)`` uint8, normalised here with the
    statistics the model was trained with (``stats``). The model's train/eval mode is restored; a compiled
    model runs eagerly."""
    if images_u8.dtype != torch.uint8 or images_u8.ndim != 4 or len(images_u8) == 0:
        raise ValueError(
            f"expected (N, 3, H, W) uint8 images with N > 0, got {tuple(images_u8.shape)} {images_u8.dtype}"
        )
    metrics = declared()
    total: Tensor | None = None  # (L, M, H) batch-size-weighted sums
    num_tokens = 0

    def reduce(attn: Tensor) -> Tensor:  # (B, H, T, T) -> (M, H), inside the capture hook
        nonlocal num_tokens
        num_tokens = attn.shape[-1]
        return head_metrics(attn, patch_px, metrics)

    # No autograd; an in-place compiled model runs its hooks eagerly.
    with torch.no_grad(), torch.compiler.set_stance("force_eager"):
        for start in range(0, len(images_u8), batch_size):
            batch = model_inputs(model, images_u8[start : start + batch_size], stats)  # (B, 3, H, W)
            _, per_layer = capture_attention(model, batch, reduce=reduce)
            sums = torch.stack(per_layer).double().cpu() * len(batch)  # (L, M, H)
            total = sums if total is None else total + sums
    assert total is not None
    mean = (total / len(images_u8)).float()  # (L, M, H)
    grid = grid_from_tokens(num_tokens)
    return AttentionSummary(
        heads={metric.name: mean[:, i] for i, metric in enumerate(metrics)},
        patch_px=int(patch_px),
        grid=grid,
        num_images=len(images_u8),
        uniform={m.name: m.uniform(grid, patch_px) for m in metrics if m.uniform is not None},
    )
