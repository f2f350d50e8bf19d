"""Capture attention probabilities from a timm ViT without slowing down training.

Training keeps timm's fused attention (``F.scaled_dot_product_attention``), which never
materialises the ``(B, H, T, T)`` probabilities. For analysis we switch every attention
module to timm's explicit path for one forward pass, where ``attn_drop`` receives exactly
the softmax probabilities, and read them with a forward hook on ``attn_drop``. In eval
mode that dropout is the identity, so the hook sees the probabilities that are multiplied
with the values, and storing them costs no copy (float32 in, float32 kept).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from timm.layers.attention import Attention
from torch import Tensor, nn

__all__ = ["attention_modules", "capture_attention", "unfused_attention"]

# Maps one layer's (B, H, T, T) probabilities to what is kept of them, e.g. the CLS row.
Reducer = Callable[[Tensor], Tensor]


def _unwrap(model: nn.Module) -> nn.Module:
    """The original module behind ``torch.compile`` (hooks and flags live there)."""
    return getattr(model, "_orig_mod", model)


def attention_modules(model: nn.Module) -> list[Attention]:
    """timm ``Attention`` modules of the model in registration order, i.e. block order."""
    return [m for m in _unwrap(model).modules() if isinstance(m, Attention)]


@contextmanager
def unfused_attention(model: nn.Module) -> Iterator[nn.Module]:
    """Run every timm ``Attention`` of ``model`` on the explicit (unfused) path.

    Each module's previous ``fused_attn`` value is restored on exit, also after an error.
    """
    modules = attention_modules(model)
    previous = [m.fused_attn for m in modules]
    try:
        for m in modules:
            m.fused_attn = False
        yield model
    finally:
        for m, fused in zip(modules, previous):
            m.fused_attn = fused


@torch.no_grad()
def capture_attention(
    model: nn.Module,
    images: Tensor,
    reduce: Reducer | None = None,
) -> tuple[Tensor, list[Tensor]]:
    """One eval forward pass returning ``(logits (B, C), [attention (B, H, T, T)] per block)``.

    The maps are float32, in block order. ``images`` are moved to the model's device.
    ``reduce``, if given, is applied to each layer's map inside the hook, so only its result
    is kept (e.g. ``lambda a: a[:, :, 0, 1:]`` for the CLS maps); call this once per batch
    and combine the batches yourself. The model's train/eval mode is restored afterwards.
    A ``torch.compile``d model is unwrapped and run eagerly.
    """
    model = _unwrap(model)
    modules = attention_modules(model)
    if not modules:
        raise ValueError("the model has no timm Attention modules to capture attention from")

    maps: list[Tensor] = []

    def keep(_module: nn.Module, _inputs: tuple[Tensor, ...], probs: Tensor) -> None:
        probs = probs.float()  # (B, H, T, T); no copy when already float32
        maps.append(reduce(probs) if reduce is not None else probs)

    was_training = model.training
    hooks = [m.attn_drop.register_forward_hook(keep) for m in modules]
    try:
        model.eval()  # attn_drop becomes the identity: the hook sees the true probabilities
        device = next(model.parameters()).device
        with unfused_attention(model):
            logits = model(images.to(device, non_blocking=True))  # (B, C)
    finally:
        for hook in hooks:
            hook.remove()
        model.train(was_training)

    if len(maps) != len(modules):
        raise RuntimeError(f"captured {len(maps)} attention maps from {len(modules)} attention modules")
    return logits.float(), maps
