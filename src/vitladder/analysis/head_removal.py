"""Removing attention heads from a timm ViT, the mechanism of the head-ablation probe (docs/design.md §4): forward
hooks that act per row of the batch, so several ablations run stacked in one batch. Mean ablation overwrites the
head's channels of the input of ``proj`` with their mean over the analysis images at each token; uniform ablation
zeroes the head's queries at the output of ``q_norm``, so every score is 0 and the softmax exactly ``1 / T`` (the
fused path keeps running). The hooks rely on the layout of timm's ``Attention.forward``, which
tests/analysis/test_head_removal.py pins against a hand-written attention.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Literal

import torch
import torch.nn.functional as F
from timm.layers.attention import Attention
from torch import Tensor, nn

from vitladder.analysis.capture import evaluating

Mode = Literal["mean", "uniform"]
MODES: tuple[Mode, ...] = ("mean", "uniform")


@dataclass(frozen=True, eq=False)
class Ablation:
    """Heads removed together, in one mode."""

    group: str  # "head", "local_half", "nonlocal_half", "most_local", "least_local" or "random"
    mode: Mode
    heads: Tensor  # (L, H) bool, True where removed
    draw: int | None = None  # which random draw

    @property
    def start(self) -> int:
        """The first layer with a removed head: the blocks below it run as in the clean model."""
        return int(self.heads.any(dim=1).nonzero()[0])

    @property
    def size(self) -> int:
        return int(self.heads.sum())

    @property
    def label(self) -> str:
        """The removed heads as ``layer.head``, e.g. ``"0.3 2.1"``."""
        return " ".join(f"{int(layer)}.{int(head)}" for layer, head in self.heads.nonzero())


def _check_vit(model: nn.Module) -> None:
    attns = [getattr(block, "attn", None) for block in getattr(model, "blocks", ())]
    if not attns or not all(isinstance(a, Attention) and isinstance(a.norm, nn.Identity) for a in attns):
        raise ValueError("head ablation needs a timm VisionTransformer whose heads reach proj unmixed (no scale_norm)")


def _batches(model: nn.Module, images: Tensor, batch_size: int) -> Iterator[Tensor]:
    param = next(model.parameters())
    for start in range(0, len(images), batch_size):
        yield images[start : start + batch_size].to(param.device, param.dtype, non_blocking=True)


def head_output_means(model: nn.Module, images: Tensor, batch_size: int) -> Tensor:
    """Each head's output averaged over ``images`` at each token, ``(L, T, H, head_dim)`` float32: what mean ablation
    puts in its place. The caller sets eval mode and no gradients."""
    sums: list[Tensor | float] = [0.0] * len(model.blocks)  # per layer (T, H * head_dim)

    def add(layer: int, _module: nn.Module, args: tuple[Tensor, ...]) -> None:
        sums[layer] = args[0].float().sum(dim=0) + sums[layer]

    hooks = [block.attn.proj.register_forward_pre_hook(partial(add, i)) for i, block in enumerate(model.blocks)]
    try:
        for batch in _batches(model, images, batch_size):
            model(batch)
    finally:
        for hook in hooks:
            hook.remove()
    attn = model.blocks[0].attn
    return (torch.stack(sums) / len(images)).unflatten(-1, (attn.num_heads, attn.head_dim))  # type: ignore[arg-type]


def ablated_logits(
    model: nn.Module, hidden: Tensor, start: int, ablations: Sequence[Ablation], head_means: Tensor | None = None
) -> Tensor:
    """Logits ``(A, B, C)`` from block ``start``'s input ``hidden`` ``(B, T, D)`` under each ablation, stacked in one
    batch: row ``a * B + b`` removes the heads of ``ablations[a]``. ``head_means`` (``head_output_means``) serve mean
    ablation. The caller sets eval mode and no gradients."""
    _check_vit(model)
    if not ablations:
        raise ValueError("no ablations to run")
    if any(a.start < start for a in ablations):
        raise ValueError(f"an ablation removes a head below layer {start}, whose input is given")
    if any(a.mode == "mean" for a in ablations) and head_means is None:
        raise ValueError("mean ablation needs head_means (head_output_means over the analysis images)")
    rows = {}  # mode -> (A*B, L, H) bool: the heads removed in each row of the stacked batch
    for mode in {a.mode for a in ablations}:
        masks = torch.stack([a.heads & (a.mode == mode) for a in ablations])  # (A, L, H)
        rows[mode] = masks.repeat_interleave(len(hidden), dim=0).to(hidden.device)

    def uniform(layer: int, _module: nn.Module, _args: tuple[Tensor, ...], q: Tensor) -> Tensor:
        return q.masked_fill(rows["uniform"][:, layer, :, None, None], 0.0)  # q (A*B, H, T, head_dim)

    def mean(layer: int, _module: nn.Module, args: tuple[Tensor, ...]) -> tuple[Tensor]:
        means = head_means[layer].to(args[0])  # type: ignore[index]  # (T, H, head_dim)
        heads = args[0].unflatten(-1, means.shape[-2:])  # (A*B, T, H, head_dim): the input of proj, head by head
        return (torch.where(rows["mean"][:, layer, None, :, None], means, heads).flatten(-2),)

    hooks = []
    for layer in range(start, len(model.blocks)):
        attn = model.blocks[layer].attn
        hooks += [attn.q_norm.register_forward_hook(partial(uniform, layer))] if "uniform" in rows else []
        hooks += [attn.proj.register_forward_pre_hook(partial(mean, layer))] if "mean" in rows else []
    try:
        x = hidden.repeat(len(ablations), 1, 1)  # (A*B, T, D), ablation-major
        for block in model.blocks[start:]:
            x = block(x)
        return model.forward_head(model.norm(x)).unflatten(0, (len(ablations), len(hidden)))
    finally:
        for hook in hooks:
            hook.remove()


def block_inputs(model: nn.Module, images: Tensor) -> tuple[Tensor, list[Tensor]]:
    """Clean logits ``(B, C)`` and the input of every block ``[(B, T, D)] * L``."""
    inputs: list[Tensor] = []
    hooks = [block.register_forward_pre_hook(lambda _m, args: inputs.append(args[0])) for block in model.blocks]
    try:
        logits = model(images)
    finally:
        for hook in hooks:
            hook.remove()
    return logits, inputs


@dataclass(frozen=True)
class Outcomes:
    """Per image: correct or not, and the cross-entropy, clean and under each ablation (CPU)."""

    clean_correct: Tensor  # (N,) bool
    clean_loss: Tensor  # (N,) float32
    correct: Tensor  # (A, N) bool
    loss: Tensor  # (A, N) float32


def ablate(
    model: nn.Module,
    images: Tensor,
    labels: Tensor,
    ablations: Sequence[Ablation],
    batch_size: int = 250,
    stack: int = 6,
) -> Outcomes:
    """Run ``ablations`` on ``images`` ``(N, 3, H, W)`` (normalised) with ``labels`` ``(N,)``: per batch of
    ``batch_size`` one clean forward keeps every block's input, then the ablations that share their first removed
    layer run from there, ``stack`` at a time in one batch. Eval mode (restored), no gradients, on the model's
    device; results on the CPU."""
    _check_vit(model)
    if images.ndim != 4 or len(images) == 0 or labels.shape != (len(images),):
        shapes = f"{tuple(images.shape)} and {tuple(labels.shape)}"
        raise ValueError(f"expected images (N, 3, H, W) with N > 0 and labels (N,), got {shapes}")
    device = next(model.parameters()).device
    labels = labels.to(device)
    correct = torch.zeros(len(ablations), len(images), dtype=torch.bool, device=device)  # (A, N)
    loss = torch.zeros(len(ablations), len(images), device=device)  # (A, N)
    by_start: dict[int, list[int]] = {}
    for index, ablation in enumerate(ablations):
        by_start.setdefault(ablation.start, []).append(index)
    chunks = [(start, ids[i : i + stack]) for start, ids in sorted(by_start.items()) for i in range(0, len(ids), stack)]
    clean_correct, clean_loss = [], []
    with evaluating(model):
        means = head_output_means(model, images, batch_size) if any(a.mode == "mean" for a in ablations) else None
        for offset, batch in zip(range(0, len(images), batch_size), _batches(model, images, batch_size)):
            span, y = slice(offset, offset + len(batch)), labels[offset : offset + len(batch)]  # y (B,)
            logits, inputs = block_inputs(model, batch)  # (B, C), [(B, T, D)] * L
            clean_correct.append(logits.argmax(dim=-1) == y)
            clean_loss.append(F.cross_entropy(logits.float(), y, reduction="none"))
            for start, chunk in chunks:
                out = ablated_logits(model, inputs[start], start, [ablations[i] for i in chunk], means).float()
                correct[chunk, span] = out.argmax(dim=-1) == y  # out (K, B, C)
                loss[chunk, span] = F.cross_entropy(out.transpose(1, 2), y.expand(len(chunk), -1), reduction="none")
    return Outcomes(torch.cat(clean_correct).cpu(), torch.cat(clean_loss).cpu(), correct.cpu(), loss.cpu())
