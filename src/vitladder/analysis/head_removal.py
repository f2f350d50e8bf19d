"""Removing attention heads from a timm ViT: the mechanism of the head-ablation probe (``ablation.py``).

Two ways to remove head ``h`` of layer ``l`` (docs/design.md §4):

- **mean** ablation: the head's output (its slice of ``attn @ v``, the input of ``proj``) is replaced
  by its mean over the analysis images at each token position (``head_output_means``, one clean pass).
  What the head says about *this* image is gone; what it says on average stays.
- **uniform** ablation: its attention is replaced by uniform attention over all ``T`` tokens, so its
  output becomes the mean of its values over the tokens. Where it looks is gone; what it reads stays.

Both are forward hooks on timm's ``Attention`` submodules that act per row of the batch, so several
ablations run stacked in one batch: uniform attention by zeroing the head's queries at the output of
``q_norm`` (scores all 0, so the softmax is exactly ``1 / T``, and the fused path keeps running), mean
ablation by a forward pre-hook on ``proj`` that overwrites the head's channels. Both rely on the layout
of timm's ``Attention.forward``; tests/analysis/test_head_removal.py pins them against a hand-written
attention. The blocks below an ablation's first removed layer are the clean model's, so ``ablate``
keeps their output from one clean forward per batch and runs only the blocks from there on.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from timm.layers.attention import Attention
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

__all__ = ["MODES", "Ablation", "HeadAblator", "Mode", "Outcomes", "ablate", "evaluating", "head_output_means"]

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


def _vit(model: nn.Module) -> nn.Module:
    """The eager module behind ``torch.compile`` (as capture.py), checked to be a timm ViT we can ablate."""
    model = getattr(model, "_orig_mod", model)
    blocks = getattr(model, "blocks", None)
    if blocks is None or not hasattr(model, "forward_head") or not hasattr(model, "norm"):
        raise ValueError("head ablation needs a timm VisionTransformer (blocks, norm, forward_head)")
    for block in blocks:
        attn = getattr(block, "attn", None)
        if not isinstance(attn, Attention):
            raise ValueError(f"head ablation needs timm Attention in every block, got {type(attn).__name__}")
        if not isinstance(getattr(attn, "norm", nn.Identity()), nn.Identity) or getattr(attn, "gate", None):
            raise ValueError("head ablation needs attention whose head outputs reach proj unmixed (no scale_norm/gate)")
    return model


def _attentions(model: nn.Module) -> list[Attention]:
    return [block.attn for block in model.blocks]


def head_output_means(model: nn.Module, images: Tensor, batch_size: int) -> Tensor:
    """Each head's output (its slice of the input of ``proj``) averaged over ``images`` at each token
    position, ``(L, T, H, head_dim)`` float32: what mean ablation puts in its place. Eval, no gradients."""
    model = _vit(model)
    attns = _attentions(model)
    sums: list[Tensor | None] = [None] * len(attns)  # per layer (T, H * head_dim)

    def adder(layer: int):
        def add(_module: nn.Module, args: tuple[Tensor, ...]) -> None:
            total = args[0].float().sum(dim=0)  # (T, H * head_dim)
            sums[layer] = total if sums[layer] is None else sums[layer] + total

        return add

    hooks = [attn.proj.register_forward_pre_hook(adder(layer)) for layer, attn in enumerate(attns)]
    try:
        with evaluating(model):
            for batch in _batches(model, images, batch_size):
                model(batch)
    finally:
        for hook in hooks:
            hook.remove()
    if any(total is None for total in sums):
        raise RuntimeError("a block's attention did not run: no head output to average")
    means = torch.stack(sums) / len(images)  # type: ignore[arg-type]  # (L, T, H * head_dim)
    return means.unflatten(-1, (attns[0].num_heads, attns[0].head_dim))  # (L, T, H, head_dim)


class HeadAblator:
    """Forward hooks that remove heads per row of the batch; use as a context manager (hooks removed on exit).

    ``forward(images, ablations)`` runs every ablation on every image, ``(A, B, C)`` logits;
    ``forward_from(hidden, start, ablations)`` does the same from block ``start``'s input ``(B, T, D)``
    when every ablation leaves the blocks below ``start`` untouched. ``head_means`` ``(L, T, H, head_dim)``
    (``head_output_means``) is needed for mean ablations. The caller sets eval mode and no gradients.
    """

    def __init__(self, model: nn.Module, head_means: Tensor | None = None) -> None:
        self.model = _vit(model)
        self.head_means = head_means
        self._rows: dict[Mode, Tensor | None] = {"mean": None, "uniform": None}  # (R, L, H) bool per mode
        self._layers: dict[Mode, frozenset[int]] = {"mean": frozenset(), "uniform": frozenset()}
        self._handles: list[RemovableHandle] = []

    def __enter__(self) -> HeadAblator:
        for layer, attn in enumerate(_attentions(self.model)):
            self._handles.append(attn.q_norm.register_forward_hook(self._uniform_hook(layer)))
            self._handles.append(attn.proj.register_forward_pre_hook(self._mean_hook(layer)))
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def forward(self, images: Tensor, ablations: Sequence[Ablation]) -> Tensor:
        """Logits ``(A, B, C)`` of ``images`` ``(B, 3, H, W)`` under each ablation."""
        with self._removing(ablations, len(images)):
            stacked = images.repeat(len(ablations), 1, 1, 1)  # (A*B, 3, H, W), ablation-major
            return self.model(stacked).unflatten(0, (len(ablations), len(images)))

    def forward_from(self, hidden: Tensor, start: int, ablations: Sequence[Ablation]) -> Tensor:
        """Logits ``(A, B, C)`` from block ``start``'s input ``hidden`` ``(B, T, D)`` under each ablation."""
        if any(a.start < start for a in ablations):
            raise ValueError(f"an ablation removes a head below layer {start}, whose input is given")
        with self._removing(ablations, len(hidden)):
            x = hidden.repeat(len(ablations), 1, 1)  # (A*B, T, D), ablation-major
            for block in self.model.blocks[start:]:
                x = block(x)
            return self.model.forward_head(self.model.norm(x)).unflatten(0, (len(ablations), len(hidden)))

    @contextmanager
    def _removing(self, ablations: Sequence[Ablation], batch: int) -> Iterator[None]:
        """While inside, row ``a * batch + b`` (ablation-major) removes the heads of ``ablations[a]``."""
        if not ablations:
            raise ValueError("no ablations to run")
        if any(a.mode == "mean" for a in ablations) and self.head_means is None:
            raise ValueError("mean ablation needs head_means (head_output_means over the analysis images)")
        device = next(self.model.parameters()).device
        try:
            for mode in MODES:
                if any(a.mode == mode for a in ablations):
                    masks = torch.stack([a.heads & (a.mode == mode) for a in ablations])  # (A, L, H)
                    self._layers[mode] = frozenset(masks.any(dim=(0, 2)).nonzero().flatten().tolist())
                    self._rows[mode] = masks.repeat_interleave(batch, dim=0).to(device)  # (A*B, L, H)
            yield
        finally:
            self._rows = {"mean": None, "uniform": None}
            self._layers = {"mean": frozenset(), "uniform": frozenset()}

    def _uniform_hook(self, layer: int):
        def hook(_module: nn.Module, _args: tuple[Tensor, ...], q: Tensor) -> Tensor | None:
            rows = self._rows["uniform"]
            if rows is None or layer not in self._layers["uniform"]:
                return None
            return q.masked_fill(rows[:, layer, :, None, None], 0.0)  # q (R, H, T, head_dim): scores 0

        return hook

    def _mean_hook(self, layer: int):
        def hook(_module: nn.Module, args: tuple[Tensor, ...]) -> tuple[Tensor, ...] | None:
            rows = self._rows["mean"]
            if rows is None or layer not in self._layers["mean"]:
                return None
            assert self.head_means is not None
            mean = self.head_means[layer].to(args[0])  # (T, H, head_dim)
            heads = args[0].unflatten(-1, mean.shape[-2:])  # (R, T, H, head_dim)
            return (torch.where(rows[:, layer, None, :, None], mean, heads).flatten(-2),)  # (R, T, H * head_dim)

        return hook


# --- running the plan ----------------------------------------------------------------------------


@contextmanager
def evaluating(model: nn.Module) -> Iterator[None]:
    """Eval mode, no gradients, an in-place compiled model run eagerly; the train/eval mode restored."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), torch.compiler.set_stance("force_eager"):
            yield
    finally:
        model.train(was_training)


def _batches(model: nn.Module, images: Tensor, batch_size: int) -> Iterator[Tensor]:
    param = next(model.parameters())
    for start in range(0, len(images), batch_size):
        yield images[start : start + batch_size].to(param.device, param.dtype, non_blocking=True)


def _block_inputs(model: nn.Module, images: Tensor) -> tuple[Tensor, list[Tensor]]:
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


def _chunks(ablations: Sequence[Ablation], stack: int) -> list[tuple[int, list[int]]]:
    """Indices of ``ablations`` in groups of at most ``stack`` that share their first removed layer."""
    by_start: dict[int, list[int]] = {}
    for index, ablation in enumerate(ablations):
        by_start.setdefault(ablation.start, []).append(index)
    return [(start, ids[i : i + stack]) for start, ids in sorted(by_start.items()) for i in range(0, len(ids), stack)]


def ablate(
    model: nn.Module,
    images: Tensor,
    labels: Tensor,
    ablations: Sequence[Ablation],
    batch_size: int = 250,
    stack: int = 6,
) -> Outcomes:
    """Run ``ablations`` on ``images`` ``(N, 3, H, W)`` (normalised) with ``labels`` ``(N,)``.

    Per batch of ``batch_size`` images one clean forward keeps every block's input; each ablation then runs
    the blocks from its first removed layer on, ``stack`` ablations at a time in one batch of
    ``stack * batch_size`` rows. Mean ablation first takes one clean pass for the head means.
    Eval mode (restored), no gradients, on the model's device; results on the CPU.
    """
    model = _vit(model)
    if images.ndim != 4 or len(images) == 0 or labels.shape != (len(images),):
        shapes = f"{tuple(images.shape)} and {tuple(labels.shape)}"
        raise ValueError(f"expected images (N, 3, H, W) with N > 0 and labels (N,), got {shapes}")
    device = next(model.parameters()).device
    labels = labels.to(device)
    correct = torch.zeros(len(ablations), len(images), dtype=torch.bool, device=device)  # (A, N)
    loss = torch.zeros(len(ablations), len(images), device=device)  # (A, N)
    clean_correct, clean_loss = [], []
    chunks = _chunks(ablations, stack)
    with evaluating(model):
        means = head_output_means(model, images, batch_size) if any(a.mode == "mean" for a in ablations) else None
        with HeadAblator(model, means) as ablator:
            offset = 0
            for batch in _batches(model, images, batch_size):
                span = slice(offset, offset + len(batch))
                y = labels[span]  # (B,)
                offset += len(batch)
                logits, inputs = _block_inputs(model, batch)  # (B, C), [(B, T, D)] * L
                clean_correct.append(logits.argmax(dim=-1) == y)
                clean_loss.append(F.cross_entropy(logits.float(), y, reduction="none"))
                for start, chunk in chunks:
                    out = ablator.forward_from(inputs[start], start, [ablations[i] for i in chunk]).float()  # (K, B, C)
                    correct[chunk, span] = out.argmax(dim=-1) == y
                    loss[chunk, span] = F.cross_entropy(out.transpose(1, 2), y.expand(len(chunk), -1), reduction="none")
    return Outcomes(torch.cat(clean_correct).cpu(), torch.cat(clean_loss).cpu(), correct.cpu(), loss.cpu())
