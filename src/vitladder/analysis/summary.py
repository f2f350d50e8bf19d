"""One model's attention, summarised: every declared per-head metric (``metrics.METRICS``) over many images, reduced
inside the capture hook (memory holds one batch of one layer) and weighted by batch size (``batch_size`` changes
nothing); and one example image's CLS maps and rollout.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from vitladder.analysis.capture import capture_attention
from vitladder.analysis.metrics import attention_rollout, declared
from vitladder.data.augment import normalize
from vitladder.data.stats import ChannelStats


def model_inputs(model: nn.Module, images_u8: Tensor, stats: ChannelStats) -> Tensor:
    """Normalised float images on the model's device, in its parameters' dtype (bf16-true models too)."""
    param = next(model.parameters())
    images = images_u8.to(param.device, non_blocking=True)
    return normalize(images, stats.mean, stats.std).to(param.dtype)  # (B, 3, H, W)


@dataclass(frozen=True)
class ExampleAttention:
    """One image's CLS attention in every layer and head."""

    index: int  # position among the images analysed
    image: Tensor  # (3, H_px, W_px) uint8, CPU
    label: int | None  # true class index when known
    predicted: int  # the model's class index
    cls_maps: Tensor  # (L, H, N): the CLS query's attention over the N patches
    rollout_by_layer: Tensor  # (L, N): attention rollout through layers 0..l


def example_attention(
    model: nn.Module, images_u8: Tensor, labels: Tensor | None, index: int, stats: ChannelStats
) -> ExampleAttention:
    image = images_u8[index : index + 1]  # (1, 3, H, W)
    logits, maps = capture_attention(model, model_inputs(model, image, stats))  # maps: [(1, H, T, T)] * L
    return ExampleAttention(
        index=index,
        image=image[0].cpu(),
        label=None if labels is None else int(labels[index]),
        predicted=int(logits.argmax(dim=-1)[0]),
        cls_maps=torch.stack([m[0, :, 0, 1:] for m in maps]).cpu(),  # (L, H, N)
        rollout_by_layer=torch.cat([attention_rollout(maps[: layer + 1]) for layer in range(len(maps))]).cpu(),
    )


@dataclass(frozen=True)
class AttentionSummary:
    heads: Mapping[str, Tensor]  # metric name (declared()) -> per head (L, H)
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


def analyse(
    model: nn.Module, images_u8: Tensor, batch_size: int, patch_px: int, stats: ChannelStats
) -> AttentionSummary:
    """``model``'s attention over ``images_u8`` ``(N, 3, S, S)`` uint8, normalised with the model's ``stats``."""
    if images_u8.dtype != torch.uint8 or images_u8.ndim != 4 or len(images_u8) == 0:
        raise ValueError(
            f"expected (N, 3, H, W) uint8 images with N > 0, got {tuple(images_u8.shape)} {images_u8.dtype}"
        )
    metrics = declared()

    def reduce(attn: Tensor) -> Tensor:  # (B, H, T, T) -> (M, H), inside the capture hook
        return torch.stack([metric.fn(attn, patch_px) for metric in metrics])

    total: Tensor | float = 0.0  # (L, M, H) batch-size-weighted sums
    for start in range(0, len(images_u8), batch_size):
        batch = model_inputs(model, images_u8[start : start + batch_size], stats)  # (B, 3, H, W)
        _, per_layer = capture_attention(model, batch, reduce=reduce)
        total = total + torch.stack(per_layer).double().cpu() * len(batch)
    mean = (total / len(images_u8)).float()  # (L, M, H)
    grid = images_u8.shape[-1] // patch_px
    return AttentionSummary(
        heads={metric.name: mean[:, i] for i, metric in enumerate(metrics)},
        uniform={m.name: m.uniform(grid, patch_px) for m in metrics if m.uniform is not None},
    )
