"""The edges of the metrics' and the summary's contract that a changed number would slip through:
every patch query counts, the maths runs where the attention is (the meta device stands in for a
GPU), bad input is refused with its message, and analyse's defaults and dtypes."""

from __future__ import annotations

import pytest
import torch

from vitladder.analysis import summary as summary_module
from vitladder.analysis.metrics import attention_entropy, attention_rollout, cls_share, mean_attention_distance
from vitladder.analysis.summary import analyse
from vitladder.data.sources.cifar10 import STATS as CIFAR10_STATS
from vitladder.model import ViTConfig, build_vit


def test_cls_share_averages_every_patch_query() -> None:
    attn = torch.zeros(1, 1, 5, 5)  # (B, H, T, T): CLS + a 2x2 grid
    cls_weights = torch.tensor([0.9, 0.1, 0.2, 0.3, 0.4])  # per query; the CLS query's own row is left out
    attn[0, 0, :, 0] = cls_weights
    attn[0, 0, :, 1] = 1 - cls_weights
    assert cls_share(attn).item() == pytest.approx(0.25)


def test_the_maths_runs_on_the_attentions_device() -> None:
    attn = torch.full((2, 3, 5, 5), 0.2, device="meta")  # (B, H, T, T)
    for value in (
        mean_attention_distance(attn, 4),
        mean_attention_distance(attn, 4, "drop"),
        attention_entropy(attn),
        cls_share(attn),
        attention_rollout([attn, attn]),
    ):
        assert value.device.type == "meta"


def test_bad_attention_is_refused_with_its_message() -> None:
    with pytest.raises(ValueError, match=r"^expected attention of shape \(B, H, T, T\), got \(1, 1, 5, 4\)$"):
        attention_entropy(torch.ones(1, 1, 5, 4) / 4)  # not square
    with pytest.raises(ValueError, match="^attention rollout needs at least one layer of attention$"):
        attention_rollout([])


def tiny_vit() -> torch.nn.Module:
    torch.manual_seed(0)
    return build_vit(ViTConfig(patch_size=8, embed_dim=12, depth=2)).eval()


def images(n: int) -> torch.Tensor:
    return torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(n))


def test_a_bf16_model_is_analysed_in_its_own_dtype() -> None:
    model, batch = tiny_vit(), images(2)
    reference = analyse(model, batch, batch_size=2, patch_px=8, stats=CIFAR10_STATS)
    low = analyse(model.to(torch.bfloat16), batch, batch_size=2, patch_px=8, stats=CIFAR10_STATS)
    assert torch.allclose(low.heads["entropy_nats"], reference.heads["entropy_nats"], atol=0.05)


def test_the_images_go_to_the_models_device_and_dtype() -> None:
    model = tiny_vit().to(device="meta", dtype=torch.bfloat16)
    inputs = summary_module.model_inputs(model, images(2), CIFAR10_STATS)  # what every analysis forward pass sees
    assert inputs.device.type == "meta" and inputs.dtype == torch.bfloat16 and inputs.shape == (2, 3, 32, 32)
