"""Attention probabilities from a timm ViT, and the mode every analysis runs the model in. For one forward pass every
``Attention`` leaves its fused path (timm's own ``fused_attn`` switch, which training keeps on), so ``attn_drop`` (the
identity in eval mode) receives the ``(B, H, T, T)`` probabilities and a hook reads them. timm's ``AttentionExtract``
reads the same module but leaves its hooks on the model (``method="hook"``) or traces it on every call (``"fx"``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

import torch
from timm.layers.attention import Attention
from torch import Tensor, nn


@contextmanager
def evaluating(model: nn.Module) -> Iterator[None]:
    """Eval mode, no gradients, a compiled model run eagerly (its hooks fire); the train/eval mode restored."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), torch.compiler.set_stance("force_eager"):
            yield
    finally:
        model.train(was_training)


def attention_modules(model: nn.Module) -> list[Attention]:
    """The timm ``Attention`` modules in block order (a compiled model's too: they are its submodules)."""
    return [m for m in model.modules() if isinstance(m, Attention)]


def capture_attention(
    model: nn.Module, images: Tensor, reduce: Callable[[Tensor], Tensor] | None = None
) -> tuple[Tensor, list[Tensor]]:
    """One eval-mode forward pass of ``images`` (moved to the model's device): ``(logits (B, C), [attention
    (B, H, T, T) float32] per block)``. ``reduce``, if given, maps each layer's attention to what is kept of it
    inside the hook, so memory holds one layer's map at a time (e.g. ``lambda a: a[:, :, 0, 1:]``, the CLS rows)."""
    modules = attention_modules(model)
    if not modules:
        raise ValueError("the model has no timm Attention modules to capture attention from")
    maps: list[Tensor] = []

    def keep(_module: nn.Module, _inputs: tuple[Tensor, ...], probs: Tensor) -> None:
        maps.append(reduce(probs.float()) if reduce is not None else probs.float())  # no copy when float32

    with ExitStack() as undo, evaluating(model):  # hooks removed, each module's own setting restored, on any exit
        for m in modules:
            undo.enter_context(m.attn_drop.register_forward_hook(keep))
            undo.callback(setattr, m, "fused_attn", m.fused_attn)
            m.fused_attn = False
        logits = model(images.to(next(model.parameters()).device, non_blocking=True))  # (B, C)
    return logits.float(), maps
