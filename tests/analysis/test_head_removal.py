"""Removing heads from a timm ViT: the hooks do what mean and uniform ablation mean, on a hand-written
attention, and the residual-stream reuse changes nothing."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from timm.models.vision_transformer import VisionTransformer
from torch import Tensor

from vitladder.analysis.probes.head_ablation import Ablation, ablate, ablated_logits, block_inputs, head_output_means

DEPTH, HEADS, DIM = 3, 4, 16  # a tiny ViT: 16 px images, 4 px patches, T = 17 tokens
HEAD_DIM = DIM // HEADS


def tiny_vit(seed: int = 0, fused: bool = True) -> VisionTransformer:
    """Weights of unit scale rather than timm's 0.02 initialisation, so that every head matters to the logits."""
    torch.manual_seed(seed)
    vit = VisionTransformer(img_size=16, patch_size=4, num_classes=5, embed_dim=DIM, depth=DEPTH, num_heads=HEADS)
    with torch.no_grad():
        for module in vit.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.normal_(0, module.in_features**-0.5)
                module.bias.normal_(0, 0.1)
        vit.pos_embed.normal_()
        vit.cls_token.normal_()
    for block in vit.blocks:
        block.attn.fused_attn = fused
    return vit.eval()


def images(n: int = 12, seed: int = 1) -> Tensor:
    return torch.randn(n, 3, 16, 16, generator=torch.Generator().manual_seed(seed))


def one_head(layer: int, head: int, mode: str) -> Ablation:
    heads = torch.zeros(DEPTH, HEADS, dtype=torch.bool)
    heads[layer, head] = True
    return Ablation("head", mode, heads)  # type: ignore[arg-type]


def hand_attention(attn, x: Tensor) -> tuple[Tensor, Tensor]:
    """timm's Attention written out: per-head outputs ``attn @ v`` (B, H, T, hd) and the values v (B, H, T, hd)."""
    b, t, _ = x.shape
    q, k, v = F.linear(x, attn.qkv.weight, attn.qkv.bias).view(b, t, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
    weights = (q @ k.transpose(-2, -1) * HEAD_DIM**-0.5).softmax(dim=-1)  # (B, H, T, T)
    return weights @ v, v


def hand_logits(model: VisionTransformer, x0: Tensor, layer: int, head: int, mode: str, means: Tensor | None) -> Tensor:
    """Logits with head ``head`` of ``layer`` removed, the ablated block computed by hand from block 0's input."""
    x = x0
    for index, block in enumerate(model.blocks):
        if index != layer:
            x = block(x)
            continue
        out, v = hand_attention(block.attn, block.norm1(x))  # (B, H, T, hd) each
        out = out.clone()
        if mode == "uniform":
            out[:, head] = v[:, head].mean(dim=1, keepdim=True)  # uniform attention: the mean value over tokens
        else:
            out[:, head] = means  # (T, hd): the head's mean output over the images
        x = x + block.attn.proj(out.transpose(1, 2).reshape(x.shape))
        x = x + block.mlp(block.norm2(x))
    return model.forward_head(model.norm(x))


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("mode", ["mean", "uniform"])
def test_hooks_match_hand_written_ablation(mode: str, fused: bool) -> None:
    model, batch = tiny_vit(fused=fused), images()
    layer, head = 1, 2
    with torch.no_grad():
        clean, inputs = block_inputs(model, batch)
        clean_out, _ = hand_attention(model.blocks[layer].attn, model.blocks[layer].norm1(inputs[layer]))
        hand_means = clean_out[:, head].mean(dim=0)  # (T, hd) over the images, at each token
        expected = hand_logits(model, inputs[0], layer, head, mode, hand_means)
        means = head_output_means(model, batch, batch_size=5)  # (L, T, H, hd), three uneven batches
        assert means.shape == (DEPTH, 17, HEADS, HEAD_DIM)
        torch.testing.assert_close(means[layer, :, head], hand_means, atol=1e-6, rtol=1e-5)
        got = ablated_logits(model, inputs[0], 0, [one_head(layer, head, mode)], means)[0]  # (B, C)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert (got - clean).abs().max() > 1e-2  # the ablation does change the logits


def test_zero_projection_columns_cost_nothing_under_mean_ablation() -> None:
    model, batch = tiny_vit(), images()
    with torch.no_grad():
        model.blocks[1].attn.proj.weight[:, 2 * HEAD_DIM : 3 * HEAD_DIM] = 0  # head 2 of layer 1 writes nothing
        labels = model(batch).argmax(dim=-1)
    outcomes = ablate(model, batch, labels, [one_head(1, 2, "mean"), one_head(1, 1, "mean")])
    assert outcomes.clean_correct.all()
    assert torch.equal(outcomes.correct[0], outcomes.clean_correct)
    torch.testing.assert_close(outcomes.loss[0], outcomes.clean_loss, atol=1e-6, rtol=0)
    assert (outcomes.loss[1] - outcomes.clean_loss).abs().max() > 1e-4  # another head does cost something


@pytest.mark.parametrize("part", [0, 1])  # its queries or its keys zero: every score equal, attention uniform
def test_exactly_uniform_head_costs_nothing_under_uniform_ablation(part: int) -> None:
    model, batch = tiny_vit(), images()
    rows = slice(part * DIM + 3 * HEAD_DIM, part * DIM + 4 * HEAD_DIM)  # head 3's q (or k) rows of qkv
    with torch.no_grad():
        model.blocks[2].attn.qkv.weight[rows] = 0
        model.blocks[2].attn.qkv.bias[rows] = 0
        labels = model(batch).argmax(dim=-1)
    outcomes = ablate(model, batch, labels, [one_head(2, 3, "uniform"), one_head(2, 0, "uniform")])
    assert torch.equal(outcomes.correct[0], outcomes.clean_correct)
    torch.testing.assert_close(outcomes.loss[0], outcomes.clean_loss, atol=1e-6, rtol=0)
    assert (outcomes.loss[1] - outcomes.clean_loss).abs().max() > 1e-4


def several_ablations() -> list[Ablation]:
    pair = torch.zeros(DEPTH, HEADS, dtype=torch.bool)
    pair[1, 0] = pair[2, 3] = True
    return [one_head(1, 0, "mean"), one_head(1, 3, "uniform"), Ablation("random", "mean", pair), one_head(2, 1, "mean")]


def test_residual_stream_reuse_gives_the_full_forward_logits() -> None:
    model, batch = tiny_vit(), images()
    chunk = several_ablations()[:3]  # all start at layer 1, modes mixed in one stack
    with torch.no_grad():
        means = head_output_means(model, batch, batch_size=12)
        _, inputs = block_inputs(model, batch)
        full = ablated_logits(model, inputs[0], 0, chunk, means)  # (3, B, C) every block run
        reused = ablated_logits(model, inputs[1], 1, chunk, means)  # blocks 1.. from the clean input of block 1
        alone = torch.stack([ablated_logits(model, inputs[0], 0, [a], means)[0] for a in chunk])  # one per batch
        with pytest.raises(ValueError, match="below layer 2"):
            ablated_logits(model, inputs[2], 2, chunk, means)
    assert torch.equal(reused, full)
    torch.testing.assert_close(alone, full, atol=1e-5, rtol=1e-5)  # stacking rows changes nothing either


def test_ablate_matches_one_full_forward_per_ablation() -> None:
    model, batch = tiny_vit(), images(13)
    labels = torch.randint(0, 5, (13,), generator=torch.Generator().manual_seed(2))
    plan = several_ablations()
    outcomes = ablate(model, batch, labels, plan, batch_size=5, stack=2)  # uneven batches and stacks
    with torch.no_grad():
        means = head_output_means(model, batch, batch_size=13)
        logits = ablated_logits(model, block_inputs(model, batch)[1][0], 0, plan, means)  # (A, N, C) in one go
    expected_loss = F.cross_entropy(logits.transpose(1, 2), labels.expand(len(plan), -1), reduction="none")
    torch.testing.assert_close(outcomes.loss, expected_loss, atol=1e-5, rtol=1e-5)
    assert torch.equal(outcomes.correct, logits.argmax(dim=-1) == labels)
    clean = model(batch)
    torch.testing.assert_close(outcomes.clean_loss, F.cross_entropy(clean, labels, reduction="none"), atol=1e-5, rtol=0)
    assert outcomes.correct.shape == (4, 13) and outcomes.correct.dtype == torch.bool


def test_ablate_leaves_the_model_as_it_found_it() -> None:
    model, batch = tiny_vit(), images(4)
    model.train()
    ablate(model, batch, torch.zeros(4, dtype=torch.long), several_ablations())
    assert model.training
    for block in model.blocks:
        assert not block.attn.q_norm._forward_hooks and not block.attn.proj._forward_pre_hooks
        assert not block._forward_pre_hooks
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(batch), tiny_vit()(batch))  # no hook left changes the forward


def test_ablate_runs_under_bf16_autocast() -> None:
    """The training device's precision (bf16 autocast on GPUs), forced on the CPU: the hooks cast the means."""
    model, batch = tiny_vit(), images()
    with torch.no_grad():
        model.blocks[0].attn.proj.weight[:, :HEAD_DIM] = 0
        labels = model(batch).argmax(dim=-1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        outcomes = ablate(model, batch, labels, [one_head(0, 0, "mean"), one_head(0, 1, "uniform")])
    torch.testing.assert_close(outcomes.loss[0], outcomes.clean_loss, atol=1e-6, rtol=0)
    assert outcomes.loss.dtype == torch.float32 and torch.isfinite(outcomes.loss).all()


def test_mean_ablation_without_means_and_bad_input_are_refused() -> None:
    model, batch = tiny_vit(), images(2)
    with torch.no_grad(), pytest.raises(ValueError, match="head_means"):
        ablated_logits(model, block_inputs(model, batch)[1][0], 0, [one_head(0, 0, "mean")])
    with pytest.raises(ValueError, match=r"labels \(N,\)"):
        ablate(model, batch, torch.zeros(3, dtype=torch.long), [one_head(0, 0, "uniform")])
    with pytest.raises(ValueError, match="timm VisionTransformer"):
        ablate(torch.nn.Linear(2, 2), batch, torch.zeros(2, dtype=torch.long), [])


def test_ablation_describes_its_heads() -> None:
    pair = torch.zeros(DEPTH, HEADS, dtype=torch.bool)
    pair[2, 1] = pair[1, 3] = True
    ablation = Ablation("random", "uniform", pair, draw=4)
    assert (ablation.start, ablation.size, ablation.label) == (1, 2, "1.3 2.1")
