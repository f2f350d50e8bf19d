"""The head-ablation probe as the pipeline runs it: every ablation of the plan in ablation.csv with each head's
distance, the figures, the chart, done.json's numbers, its settings, and the ladder report's sentence."""

from __future__ import annotations

import math

import pytest
import torch

from vitladder.analysis.probes import Context, head_ablation, run_probes
from vitladder.analysis.summary import analyse
from vitladder.data.sources.cifar10 import STATS as CIFAR10_STATS
from vitladder.model import ViTConfig, build_vit


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
    listed = {c.key for c in head_ablation.columns()}
    assert set(scalars) <= listed  # ladder.csv has a column for every number


def test_the_settings_choose_images_and_draws() -> None:
    _, _, result = run({"images": 4, "draws": 3, "resamples": 20})
    rows = result.tables["ablation"]
    assert len([r for r in rows if r["group"] == "random"]) == 2 * 2 * 3
    assert result.scalars["ablation_clean_accuracy"] * 4 == round(result.scalars["ablation_clean_accuracy"] * 4)


def test_the_ladder_reports_sentence() -> None:
    (cell, rho) = [c for c in head_ablation.columns() if c.header]
    seeds = {
        "ablation_mean_most_local_6_drop_pts": [3.0, 3.4],
        "ablation_mean_random_6_drop_pts_mean": [1.0, 1.2],
        "ablation_mean_random_6_drop_pts_std": [0.5, 0.3],
        "ablation_mean_spearman": [-0.5],
        "ablation_mean_spearman_low": [-0.7],
        "ablation_mean_spearman_high": [-0.2],
    }
    values = lambda key: seeds.get(key, [])  # noqa: E731
    assert cell.text(values) == "without its 6 most local heads: −3.2 pts; without 6 random heads: −1.1 ± 0.4 pts"
    assert rho.text(values) == "-0.50 [-0.70, -0.20]"
    assert cell.text(lambda key: []) == "—"
