"""The per-run summary: shapes, layer means, batch weighting, a known answer, and the example image."""

from __future__ import annotations

import math

import pytest
import torch

from vitladder.analysis.capture import capture_attention
from vitladder.analysis.metrics import attention_entropy, attention_rollout, cls_share, mean_attention_distance
from vitladder.analysis.summary import analyse, example_attention
from vitladder.data.augment import normalize
from vitladder.data.sources.cifar10 import STATS as CIFAR10_STATS
from vitladder.data.stats import ChannelStats
from vitladder.model import ViTConfig, build_vit

UNIFORM_8x8 = 16.5459  # docs/design.md §4: uniform distance over the 8x8 grid of 4 px patches


def tiny_vit(patch_size: int = 4, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_vit(ViTConfig(patch_size=patch_size, embed_dim=24)).eval()


@pytest.fixture(scope="module")
def images() -> torch.Tensor:
    return torch.randint(0, 256, (7, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))


def test_shapes_and_layer_means(images: torch.Tensor) -> None:
    summary = analyse(tiny_vit(), images, batch_size=3, patch_px=4, stats=CIFAR10_STATS)
    for values in (
        summary.heads["distance_px"],
        summary.heads["entropy_nats"],
        summary.heads["cls_share"],
        summary.heads["distance_drop_px"],
    ):
        assert values.shape == (7, 6)
    assert summary.layers["distance_px"].shape == (7,)
    assert torch.allclose(summary.layers["distance_px"], summary.heads["distance_px"].mean(dim=1))
    assert torch.allclose(summary.layers["entropy_nats"], summary.heads["entropy_nats"].mean(dim=1))
    assert summary.uniform["distance_px"] == pytest.approx(UNIFORM_8x8, abs=1e-4)
    assert summary.uniform["entropy_nats"] == pytest.approx(math.log(65))
    # drop convention = renormalised distance scaled by the patch share, so it is never larger
    assert torch.all(summary.heads["distance_drop_px"] <= summary.heads["distance_px"] + 1e-5)


def test_the_images_are_normalised_with_the_statistics_the_model_was_trained_with(images: torch.Tensor) -> None:
    model, stats = tiny_vit(), ChannelStats((0.3, 0.5, 0.7), (0.1, 0.2, 0.4))  # far from CIFAR-10's
    summary = analyse(model, images, batch_size=4, patch_px=4, stats=stats)
    _, maps = capture_attention(model, normalize(images, stats.mean, stats.std))
    direct = torch.stack([mean_attention_distance(a, 4) for a in maps])  # (L, H)
    assert torch.allclose(summary.heads["distance_px"], direct, atol=1e-5)
    example = example_attention(model, images, None, 0, stats)
    assert torch.allclose(example.cls_maps, torch.stack([a[0, :, 0, 1:] for a in maps]), atol=1e-6)
    cifar = analyse(
        model, images, batch_size=4, patch_px=4, stats=CIFAR10_STATS
    )  # another normalisation moves the numbers
    assert not torch.allclose(cifar.heads["distance_px"], direct, atol=1e-4)


def test_batches_are_weighted_by_size(images: torch.Tensor) -> None:
    """Uneven batches (3 + 3 + 1) give the same numbers as one batch and as the metrics on all maps."""
    model = tiny_vit()
    streamed = analyse(model, images, batch_size=3, patch_px=4, stats=CIFAR10_STATS)
    whole = analyse(model, images, batch_size=len(images), patch_px=4, stats=CIFAR10_STATS)
    _, maps = capture_attention(model, normalize(images, CIFAR10_STATS.mean, CIFAR10_STATS.std))
    direct = torch.stack([mean_attention_distance(a, 4) for a in maps])  # (L, H)
    for got in (streamed, whole):
        assert torch.allclose(got.heads["distance_px"], direct, atol=1e-4)
        assert torch.allclose(got.heads["entropy_nats"], torch.stack([attention_entropy(a) for a in maps]), atol=1e-5)
        assert torch.allclose(got.heads["cls_share"], torch.stack([cls_share(a) for a in maps]), atol=1e-6)
        assert torch.allclose(
            got.heads["distance_drop_px"], torch.stack([mean_attention_distance(a, 4, "drop") for a in maps]), atol=1e-4
        )
    # an unweighted mean of the three batch means would differ: the last batch holds one image
    per_batch = [analyse(model, images[i : i + 3], 3, 4, stats=CIFAR10_STATS).heads["distance_px"] for i in (0, 3, 6)]
    assert not torch.allclose(torch.stack(per_batch).mean(0), direct, atol=1e-4)


def test_uniform_attention_gives_the_design_numbers(images: torch.Tensor) -> None:
    """With queries and keys zeroed every head attends uniformly over the 65 tokens."""
    model = tiny_vit()
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight.zero_()
            block.attn.qkv.bias.zero_()
    summary = analyse(model, images, batch_size=4, patch_px=4, stats=CIFAR10_STATS)
    assert torch.allclose(summary.heads["distance_px"], torch.full((7, 6), UNIFORM_8x8), atol=1e-3)
    assert torch.allclose(summary.heads["entropy_nats"], torch.full((7, 6), math.log(65)), atol=1e-4)
    assert torch.allclose(summary.heads["cls_share"], torch.full((7, 6), 1 / 65), atol=1e-6)
    assert torch.allclose(summary.heads["distance_drop_px"], torch.full((7, 6), UNIFORM_8x8 * 64 / 65), atol=1e-3)


def test_patch8_model_uses_the_4x4_grid(images: torch.Tensor) -> None:
    model = tiny_vit(patch_size=8)
    summary = analyse(model, images, batch_size=7, patch_px=8, stats=CIFAR10_STATS)
    assert example_attention(model, images, None, 0, CIFAR10_STATS).cls_maps.shape == (7, 6, 16)
    assert summary.uniform["distance_px"] == pytest.approx(16.0641, abs=1e-4)
    assert summary.uniform["entropy_nats"] == pytest.approx(math.log(17))


def test_example_image_maps_rollout_and_prediction(images: torch.Tensor) -> None:
    model = tiny_vit()
    labels = torch.arange(7) % 10
    example = example_attention(model, images, labels, 5, CIFAR10_STATS)
    logits, maps = capture_attention(model, normalize(images[5:6], CIFAR10_STATS.mean, CIFAR10_STATS.std))
    assert example.index == 5 and example.label == 5 and example.predicted == int(logits.argmax())
    assert torch.equal(example.image, images[5])
    assert example.cls_maps.shape == (7, 6, 64)
    assert torch.allclose(example.cls_maps, torch.stack([a[0, :, 0, 1:] for a in maps]), atol=1e-6)
    assert example.rollout_by_layer.shape == (7, 64)
    assert torch.allclose(example.rollout_by_layer[-1], attention_rollout(maps)[0], atol=1e-6)
    assert torch.allclose(example.rollout_by_layer[0], attention_rollout(maps[:1])[0], atol=1e-6)


def test_model_mode_is_restored(images: torch.Tensor) -> None:
    model = tiny_vit().train()
    analyse(model, images[:2], batch_size=2, patch_px=4, stats=CIFAR10_STATS)
    assert model.training


@pytest.mark.parametrize(
    ("shape", "dtype"), [((2, 3, 32, 32), torch.float32), ((3, 32, 32), torch.uint8), ((0, 3, 32, 32), torch.uint8)]
)
def test_rejects_anything_but_a_nonempty_batch_of_uint8_images(shape, dtype) -> None:
    with pytest.raises(ValueError, match=r"expected \(N, 3, H, W\) uint8 images with N > 0, got"):
        analyse(tiny_vit(), torch.zeros(shape, dtype=dtype), batch_size=2, patch_px=4, stats=CIFAR10_STATS)


def test_model_compiled_in_place_runs_eagerly(images: torch.Tensor) -> None:
    """RecipeModule compiles its ViT in place (speed.compile=true); the hooks must still see the maps."""
    model = tiny_vit()
    reference = analyse(model, images, batch_size=7, patch_px=4, stats=CIFAR10_STATS)
    rollout = example_attention(model, images, None, 0, CIFAR10_STATS).rollout_by_layer
    model.compile(backend="eager")
    compiled = analyse(model, images, batch_size=7, patch_px=4, stats=CIFAR10_STATS)
    assert torch.allclose(compiled.heads["distance_px"], reference.heads["distance_px"], atol=1e-5)
    with torch.compiler.set_stance("force_eager"):  # as the cls_attention probe runs it (probes.run_probes)
        again = example_attention(model, images, None, 0, CIFAR10_STATS).rollout_by_layer
        assert torch.allclose(again, rollout, atol=1e-6)
