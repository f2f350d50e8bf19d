"""The head-ablation probe: a hand-built ViT whose class travels through one head falls to chance without it; the
plan's groups; Spearman's rho and its bootstrap interval on constructed data; and the probe as the pipeline runs it:
every ablation in ablation.csv with each head's distance, the figures, the chart, done.json's numbers, its settings
and the ladder report's sentence."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from matplotlib.backends.backend_agg import FigureCanvasAgg
from torch import Tensor

from vitladder.analysis.correlation import spearman
from vitladder.analysis.probes import Context, run_probes
from vitladder.analysis.probes.head_ablation import (
    ablation_plan,
    bootstrap_spearman,
    columns,
    head_ablation,
    plot_ablation,
    rho_text,
    spearman_keys,
)
from vitladder.analysis.summary import analyse
from vitladder.data.sources.cifar10 import STATS as CIFAR10_STATS
from vitladder.model import ViTConfig, build_vit

GAIN = 100.0  # the carrier head's query: its attention on patch 0 is one-hot in float32 (exp(-141) == 0)


def one_head_classifier():
    """A 1-layer, 2-head ViT on 8x8 images (a 2x2 grid of 4 px patches) built by hand, every weight zero but these.

    Channel 0 of the image holds the class: patch 0 is ``s`` and patch 1 ``-s`` (class 1 when ``s = +1``),
    patches 2 and 3 ``t`` and ``-t`` for a random ``t``. The patch embedding writes a patch's mean ``a`` as
    ``(a, -a)`` in features 0-1; the position embeddings put ``(1, -1)`` in features 2-3 for patch 0, 4-5 for
    the other patches, 6-7 for CLS, so every patch token has the same norm after LayerNorm and its feature 0
    is ``a * sqrt(2)``.
    Head 0 (the carrier): the CLS query (feature 6) meets only patch 0's key (feature 2), and its value is
    feature 0, so it copies ``s * sqrt(2)`` into the CLS token's features 0-1, which the classifier reads.
    Its mean over balanced classes is 0, and its uniform mean over the 5 tokens is ``(0 + s - s + t - t) / 5
    = 0``: either ablation leaves the logits the same for every image, and accuracy at chance (1/2).
    Head 1 has zero queries (uniform attention) and reads the CLS token's feature 6, the same for every
    image: neither ablation changes it. The MLP is zero.
    """
    model = build_vit(ViTConfig(patch_size=4, embed_dim=8, depth=1, num_heads=2, num_classes=2, img_size=8))
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for norm in (model.blocks[0].norm1, model.blocks[0].norm2, model.norm):
            norm.weight.fill_(1.0)
        model.patch_embed.proj.weight[0, 0] = 1 / 16  # feature 0: the patch's mean in channel 0
        model.patch_embed.proj.weight[1, 0] = -1 / 16
        pos = model.pos_embed[0]  # (1 + 4, 8)
        pos[0, 6], pos[0, 7] = 1.0, -1.0  # CLS
        pos[1, 2], pos[1, 3] = 1.0, -1.0  # patch 0
        pos[2:, 4], pos[2:, 5] = 1.0, -1.0  # patches 1-3
        qkv = model.blocks[0].attn.qkv.weight  # (3 * 8, 8): q, k, v of head 0 (rows 0-3) and head 1 (rows 4-7)
        qkv[0, 6] = GAIN  # head 0's query: CLS's feature
        qkv[8, 2] = 1.0  # head 0's key: patch 0's feature
        qkv[16, 0] = 1.0  # head 0's value: the class feature
        qkv[16 + 4, 6] = 1.0  # head 1's value: CLS's feature (its query is zero: uniform attention)
        proj = model.blocks[0].attn.proj.weight  # (8, 8)
        proj[0, 0], proj[1, 0] = 1.0, -1.0  # head 0 -> features 0-1
        proj[4, 4], proj[5, 4] = 1.0, -1.0  # head 1 -> features 4-5
        model.head.weight[1, 0], model.head.weight[0, 0] = 1.0, -1.0
    return model.eval()


def carrier_images(n: int = 32) -> tuple[Tensor, Tensor]:
    generator = torch.Generator().manual_seed(0)
    s = torch.tensor([1.0, -1.0]).repeat(n // 2)  # (n,) balanced classes
    t = torch.randint(0, 2, (n,), generator=generator).float() * 2 - 1
    images = torch.randn(n, 3, 8, 8, generator=generator)  # channels 1-2: noise the model never reads
    for patch, value in enumerate((s, -s, t, -t)):
        row, col = divmod(patch, 2)
        images[:, 0, 4 * row : 4 * row + 4, 4 * col : 4 * col + 4] = value[:, None, None]
    return images, (s > 0).long()


def test_one_head_carries_the_class_and_without_it_the_model_is_at_chance() -> None:
    images, labels = carrier_images()
    distance = torch.tensor([[4.0, 5.0]])  # (L, H); plays no part in the per-head numbers
    model = one_head_classifier()
    rows, scalars = head_ablation(model, images, labels, distance, ks=(1,), draws=2, resamples=50)
    assert scalars["ablation_clean_accuracy"] == 1.0
    with torch.no_grad():
        clean_loss = F.cross_entropy(model(images), labels).item()
    for mode in ("mean", "uniform"):
        carrier, other = [r for r in rows if r["group"] == "head" and r["mode"] == mode]  # heads 0.0 and 0.1
        assert carrier["accuracy"] == 0.5  # the same logits for every image: one class for all, half right
        assert carrier["loss"] == pytest.approx(math.log(2), abs=1e-6)  # and the two classes tied
        assert other["accuracy"] == 1.0
        assert other["loss"] == pytest.approx(clean_loss, abs=1e-6)
    assert scalars["ablation_mean_most_local_1_drop_pts"] == 50.0  # head 0.0 is the more local
    assert scalars["ablation_uniform_least_local_1_drop_pts"] == 0.0


def test_plan_holds_every_head_the_layer_halves_and_the_model_wide_groups() -> None:
    distance = torch.arange(42.0).flip(0).view(7, 6)  # head (l, h) less local than every later head
    distance[3] = torch.tensor([5.0, 1.0, 4.0, 2.0, 6.0, 3.0])
    plan = ablation_plan(distance, ks=(3, 6), draws=5, seed=7)
    assert len(plan) == 2 * (42 + 2 * 7 + 2 * (1 + 5 + 1))
    for mode in ("mean", "uniform"):
        mine = [a for a in plan if a.mode == mode]
        singles = [a for a in mine if a.group == "head"]
        assert [tuple(a.heads.nonzero()[0].tolist()) for a in singles] == [divmod(i, 6) for i in range(42)]
        local = next(a for a in mine if a.group == "local_half" and a.start == 3)
        nonlocal_ = next(a for a in mine if a.group == "nonlocal_half" and a.start == 3)
        assert local.heads[3].nonzero().flatten().tolist() == [1, 3, 5] and local.size == 3
        assert nonlocal_.heads[3].nonzero().flatten().tolist() == [0, 2, 4]
        most = next(a for a in mine if a.group == "most_local" and a.size == 3)
        least = next(a for a in mine if a.group == "least_local" and a.size == 6)
        assert most.label == "3.1 6.4 6.5"  # the three smallest distances: 1.0 (3.1), 0 (6.5), 1 (6.4)
        assert least.heads[0].all() and least.size == 6  # layer 0 holds the six largest
    random = [a for a in plan if a.group == "random"]
    assert len(random) == 2 * 2 * 5 and all(a.size in (3, 6) for a in random)
    by_mode = {m: [a.heads for a in random if a.mode == m] for m in ("mean", "uniform")}
    assert all(torch.equal(a, b) for a, b in zip(by_mode["mean"], by_mode["uniform"]))  # the same draws
    assert len({a.label for a in random if a.mode == "mean"}) == 10  # ten different sets
    again = [a.label for a in ablation_plan(distance, seed=7) if a.group == "random"]
    other = [a.label for a in ablation_plan(distance, seed=8) if a.group == "random"]
    assert again == [a.label for a in random] and other != again


def test_plan_leaves_out_what_the_model_cannot_have() -> None:
    plan = ablation_plan(torch.rand(2, 1), ks=(1, 3), draws=2)
    groups = [a.group for a in plan if a.mode == "uniform"]
    assert groups == ["head", "head", "most_local", "random", "random", "least_local"]


def drop_pattern(num_heads: int = 10, per_block: int = 10) -> tuple[Tensor, Tensor, Tensor]:
    """Head ``i`` (distance ``i``) costs the first ``(num_heads - i) * per_block`` images: the more local, the more."""
    num_images = 2 * num_heads * per_block
    clean = torch.ones(num_images, dtype=torch.bool)
    correct = torch.ones(num_heads, num_images, dtype=torch.bool)
    for head in range(num_heads):
        correct[head, : (num_heads - head) * per_block] = False
    return torch.arange(float(num_heads)), clean, correct


def resampled_rhos(distance: Tensor, clean: Tensor, correct: Tensor, resamples: int, seed: int) -> Tensor:
    """Spearman's rho of each bootstrap resample, the images drawn one by one as bootstrap_spearman draws them."""
    drawn = torch.randint(len(clean), (resamples, len(clean)), generator=torch.Generator().manual_seed(seed))
    return torch.stack(
        [spearman(distance, clean[idx].double().mean() - correct[:, idx].double().mean(dim=1)) for idx in drawn]
    )


def test_bootstrap_of_a_perfect_ordering_stays_at_minus_one() -> None:
    distance, clean, correct = drop_pattern()
    rho, low, high = bootstrap_spearman(distance, clean, correct, resamples=400, seed=0)
    assert rho == pytest.approx(-1.0)
    assert low == pytest.approx(-1.0) and high <= -0.99  # a resample breaks the order only by missing a block


def test_bootstrap_matches_resampling_images_one_by_one() -> None:
    generator = torch.Generator().manual_seed(3)
    distance = torch.rand(12, generator=generator) * 20
    clean = torch.rand(60, generator=generator) < 0.8
    correct = torch.rand(12, 60, generator=generator) < (0.5 + distance[:, None] / 40)  # local heads cost more
    rho, low, high = bootstrap_spearman(distance, clean, correct, resamples=300, seed=5)
    rhos = resampled_rhos(distance, clean, correct, 300, seed=5)  # the same draws; every one has a rho
    expected = torch.quantile(rhos, torch.tensor([0.025, 0.975], dtype=torch.float64))
    assert (low, high) == pytest.approx(expected.tolist(), abs=1e-12)
    assert rho == pytest.approx(float(spearman(distance, clean.double().mean() - correct.double().mean(dim=1))))
    assert low < rho < high


def test_bootstrap_interval_narrows_with_more_images_and_follows_its_seed() -> None:
    generator = torch.Generator().manual_seed(4)
    distance = torch.arange(20.0)
    clean = torch.ones(50, dtype=torch.bool)
    correct = torch.rand(20, 50, generator=generator) < 0.7  # drops unrelated to distance
    rho, low, high = bootstrap_spearman(distance, clean, correct, seed=1)
    assert low < 0 < high and low < rho < high
    _, low4, high4 = bootstrap_spearman(distance, clean.repeat(4), correct.repeat(1, 4), seed=1)
    assert high4 - low4 < 0.7 * (high - low)  # four times the images: about half the width
    assert bootstrap_spearman(distance, clean, correct, seed=1) == (rho, low, high)
    assert bootstrap_spearman(distance, clean, correct, seed=2) != (rho, low, high)


def test_a_resample_that_ties_every_drop_counts_as_either_end_of_the_interval() -> None:
    # Head 0 costs images 0-3, head 2 images 4-5, head 1 none: a resample missing all six ties every drop and has
    # no rho (about 1 in 600). It counts as -1 for the low end and +1 for the high end.
    distance, clean = torch.arange(3.0), torch.ones(40, dtype=torch.bool)
    correct = torch.ones(3, 40, dtype=torch.bool)
    correct[0, :4] = correct[2, 4:6] = False
    rho, low, high = bootstrap_spearman(distance, clean, correct, resamples=3000, seed=1)
    rhos = resampled_rhos(distance, clean, correct, 3000, seed=1)
    assert 0 < int(rhos.isnan().sum()) < 75  # some, and fewer than either tail holds
    assert low == pytest.approx(float(torch.quantile(rhos.nan_to_num(-1.0), 0.025)), abs=1e-12)
    assert high == pytest.approx(float(torch.quantile(rhos.nan_to_num(1.0), 0.975)), abs=1e-12)
    assert rho == pytest.approx(-0.5) and -1 < low < rho < high < 1  # too few to reach either end
    # Head 1 alone costs one image of 20: a third of the resamples have no rho, so the interval says nothing.
    correct = torch.ones(3, 20, dtype=torch.bool)
    correct[1, 0] = False
    found = bootstrap_spearman(distance, torch.ones(20, dtype=torch.bool), correct, resamples=200, seed=0)
    assert found == (pytest.approx(0.0), -1.0, 1.0) and rho_text(*found) == "+0.00 [-1.00, +1.00]"
    tied = bootstrap_spearman(distance, clean, torch.ones(3, 40, dtype=torch.bool))  # no head costs anything
    assert all(math.isnan(value) for value in tied) and rho_text(*tied) == "undefined (every head's drop tied)"


def test_rows_and_figure() -> None:
    images, labels = carrier_images(8)
    distance = torch.tensor([[4.0, 5.0]])
    rows, scalars = head_ablation(one_head_classifier(), images, labels, distance, ks=(1,), draws=2)
    assert len(rows) == len(ablation_plan(distance, ks=(1,), draws=2)) == 2 * (2 + 2 + 1 + 2 + 1)
    first = rows[0]
    assert [first[key] for key in ("mode", "group", "layer", "head", "heads")] == ["mean", "head", 0, 0, "0.0"]
    assert first["accuracy_drop_pts"] == 50.0 and first["draw"] is None
    assert [r["draw"] for r in rows if r["group"] == "random"] == [0, 1, 0, 1]
    assert [r["distance_px"] for r in rows if r["group"] == "head"] == [4.0, 5.0, 4.0, 5.0]
    fig = plot_ablation(rows, scalars, "uniform", 8, title=r"rung $\notacommand$")  # not maths: drawn as written
    FigureCanvasAgg(fig).draw()
    assert fig.axes[0].get_title().startswith("rung $\\notacommand$\n")
    rho, low, high = (scalars[f"ablation_uniform_spearman{end}"] for end in ("", "_low", "_high"))
    heading = f"uniform ablation: Spearman ρ [95% CI] {rho:+.2f} [{low:+.2f}, {high:+.2f}], 8 images"
    assert fig.axes[0].get_title().splitlines()[1] == heading
    scalars |= dict.fromkeys(spearman_keys("uniform"), math.nan)  # every head's drop tied: it used to read +nan
    heading = plot_ablation(rows, scalars, "uniform", 8).axes[0].get_title()
    assert heading == "uniform ablation: Spearman ρ [95% CI] undefined (every head's drop tied), 8 images"
    points = [
        collection.get_offsets().tolist() for collection in fig.axes[0].collections
    ]  # per layer: (distance, drop)
    assert points == [[[4.0, 50.0], [5.0, 0.0]]]


def run(settings: dict | None = None):
    torch.manual_seed(0)
    model = build_vit(ViTConfig(patch_size=8, embed_dim=24))  # 7 layers x 6 heads, a 4x4 grid
    images = torch.randint(0, 256, (8, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    labels = torch.arange(8) % 10
    ctx = Context("patch8", 0, 8, 4, CIFAR10_STATS, batch_size=4, settings={"head_ablation": settings or {}})
    return model, images, run_probes(model, images, labels, ctx, ["head_ablation"])["head_ablation"]


def test_every_ablation_with_each_heads_distance_the_figures_and_the_numbers() -> None:
    model, images, result = run({"draws": 2, "resamples": 50})
    rows = result.tables["ablation"]
    assert len(rows) == 2 * (42 + 2 * 7 + 2 * (1 + 2 + 1))  # per mode: heads, layer halves, k = 3 and 6 groups
    distance = analyse(model, images, 4, 8, stats=CIFAR10_STATS).heads["distance_px"]  # (L, H)
    heads = [r for r in rows if r["group"] == "head" and r["mode"] == "mean"]
    assert [r["distance_px"] for r in heads] == pytest.approx(distance.flatten().tolist())
    assert all(r["distance_px"] is None for r in rows if r["group"] != "head")
    assert set(result.figures) == {"ablation_mean", "ablation_uniform"}
    assert result.charts["ablation_by_distance"].kind == "scatter"
    scalars = result.scalars
    assert {"ablation_clean_accuracy", "ablation_mean_most_local_6_drop_pts", "ablation_uniform_spearman_high"} <= set(
        scalars
    )
    clean = scalars["ablation_clean_accuracy"]
    most = next(r for r in rows if (r["group"], r["mode"], r["num_heads"]) == ("most_local", "mean", 6))
    assert scalars["ablation_mean_most_local_6_drop_pts"] == pytest.approx(100 * (clean - most["accuracy"]))
    assert all(math.isfinite(v) for k, v in scalars.items() if "spearman" not in k)
    listed = {c.key for c in columns()}
    assert set(scalars) <= listed  # ladder.csv has a column for every number


def test_the_settings_choose_images_and_draws() -> None:
    _, _, result = run({"images": 4, "draws": 3, "resamples": 20})
    rows = result.tables["ablation"]
    assert len([r for r in rows if r["group"] == "random"]) == 2 * 2 * 3
    assert result.scalars["ablation_clean_accuracy"] * 4 == round(result.scalars["ablation_clean_accuracy"] * 4)


def test_the_ladder_reports_sentence() -> None:
    (cell, rho) = [c for c in columns() if c.header]
    seeds = {
        "ablation_mean_most_local_6_drop_pts": [3.0, 3.4],
        "ablation_mean_random_6_drop_pts_mean": [1.0, 1.2],
        "ablation_mean_random_6_drop_pts_std": [0.5, 0.3],
        "ablation_mean_spearman": [-0.5],
        "ablation_mean_spearman_low": [-0.7],
        "ablation_mean_spearman_high": [-0.2],
    }
    values = lambda key: seeds.get(key, [])  # noqa: E731
    assert cell.text(values) == (
        "without its 6 most local heads: −3.2 pts; without 6 random heads: −1.1 pts (sd 0.4 over draws)"
    )
    assert rho.text(values) == "-0.50 [-0.70, -0.20]"
    assert cell.text(lambda key: []) == "—"
