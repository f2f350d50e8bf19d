"""Attention capture from a tiny timm ViT: the maps are the real ones, and nothing leaks."""

from __future__ import annotations

import pytest
import torch
from timm.models.vision_transformer import VisionTransformer

from vitladder.analysis.capture import attention_modules, capture_attention

DEPTH, HEADS, TOKENS = 7, 6, 65


@pytest.fixture(scope="module")
def model() -> VisionTransformer:
    torch.manual_seed(0)
    vit = VisionTransformer(img_size=32, patch_size=4, num_classes=10, embed_dim=48, depth=DEPTH, num_heads=HEADS)
    for blk in vit.blocks:  # force the fused path on, whatever timm's environment default is
        blk.attn.fused_attn = True
    return vit


@pytest.fixture(scope="module")
def images() -> torch.Tensor:
    return torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(1))


def test_fused_flags_restored(model: VisionTransformer, images: torch.Tensor) -> None:
    mods = attention_modules(model)
    assert len(mods) == DEPTH
    assert all(m.fused_attn for m in mods)
    capture_attention(model, images)
    assert all(m.fused_attn for m in mods)
    # A mixed setting comes back module by module, also after an error inside the block.
    mods[2].fused_attn = False

    def boom(_module, _args) -> None:
        assert not any(m.fused_attn for m in mods)  # every module on its explicit path
        raise RuntimeError("boom")

    hook = model.blocks[-1].register_forward_pre_hook(boom)
    with pytest.raises(RuntimeError, match="boom"):
        capture_attention(model, images)
    hook.remove()
    assert [m.fused_attn for m in mods] == [True, True, False, True, True, True, True]
    mods[2].fused_attn = True


def test_logits_match_fused_forward(model: VisionTransformer, images: torch.Tensor) -> None:
    model.eval()
    with torch.no_grad():
        expected = model(images)  # the fused path
    logits, _ = capture_attention(model, images)
    assert logits.shape == (3, 10) and logits.dtype == torch.float32
    assert torch.allclose(logits, expected, atol=1e-5)


def test_shapes_and_rows(model: VisionTransformer, images: torch.Tensor) -> None:
    _, maps = capture_attention(model, images)
    assert len(maps) == DEPTH
    for attn in maps:
        assert attn.shape == (3, HEADS, TOKENS, TOKENS)
        assert attn.dtype == torch.float32
        assert torch.all(attn >= 0)
        assert torch.allclose(attn.sum(-1), torch.ones(3, HEADS, TOKENS), atol=1e-5)
    assert not torch.allclose(maps[0], maps[1])  # one map per block, not one repeated


@pytest.mark.parametrize("layer", [0, 4])
def test_attention_matches_hand_computation(model: VisionTransformer, images: torch.Tensor, layer: int) -> None:
    blk = model.blocks[layer]
    inputs: list[torch.Tensor] = []
    handle = blk.register_forward_pre_hook(lambda _m, args: inputs.append(args[0]))
    try:
        _, maps = capture_attention(model, images)
    finally:
        handle.remove()
    (x,) = inputs  # (B, T, C) the block's input
    with torch.no_grad():
        b, t, c = x.shape
        head_dim = c // HEADS
        qkv = blk.attn.qkv(blk.norm1(x))  # (B, T, 3C)
        qkv = qkv.reshape(b, t, 3, HEADS, head_dim).permute(2, 0, 3, 1, 4)  # (3, B, H, T, D)
        q, k = qkv[0], qkv[1]
        expected = (q @ k.transpose(-2, -1) * head_dim**-0.5).softmax(dim=-1)  # (B, H, T, T)
    assert torch.allclose(maps[layer], expected, atol=1e-6)


def test_training_mode_restored(model: VisionTransformer, images: torch.Tensor) -> None:
    model.train()
    capture_attention(model, images)
    assert model.training and all(m.training for m in model.modules())
    model.eval()
    capture_attention(model, images)
    assert not any(m.training for m in model.modules())


def test_hooks_removed(model: VisionTransformer, images: torch.Tensor) -> None:
    capture_attention(model, images)
    assert all(not m.attn_drop._forward_hooks for m in attention_modules(model))


def test_reducer_keeps_only_its_result(model: VisionTransformer, images: torch.Tensor) -> None:
    _, full = capture_attention(model, images)
    _, cls_rows = capture_attention(model, images, reduce=lambda a: a[:, :, 0, 1:].clone())
    assert [r.shape for r in cls_rows] == [(3, HEADS, TOKENS - 1)] * DEPTH
    assert all(torch.equal(r, f[:, :, 0, 1:]) for r, f in zip(cls_rows, full))


def test_a_compiled_model_runs_eagerly_with_its_own_attention(model: VisionTransformer, images: torch.Tensor) -> None:
    compiled = torch.compile(model)  # lazy: nothing compiles unless the wrapper is called eagerly
    assert attention_modules(compiled) == attention_modules(model)  # the wrapper holds the model's modules
    logits, maps = capture_attention(compiled, images)
    expected, expected_maps = capture_attention(model, images)
    assert torch.allclose(logits, expected) and len(maps) == DEPTH
    assert all(torch.equal(a, b) for a, b in zip(maps, expected_maps))
