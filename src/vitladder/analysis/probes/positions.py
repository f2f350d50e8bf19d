"""Do the learned position embeddings learn the grid? (``analysis/position_embeddings.py``; Dosovitskiy et al. 2021,
Fig. 7.) Per run the per-patch maps of cosine similarity, ``position_similarity.png``; one number per model,
Spearman's rho between two patches' similarity and their distance (strongly negative: grid-like; random
embeddings: about 0), tracked from initialisation on and shown in the ladder report."""

from __future__ import annotations

from torch import Tensor, nn

from vitladder.analysis.position_embeddings import (
    grid_correlation,
    patch_position_embeddings,
    plot_position_similarity,
    position_similarity,
)
from vitladder.analysis.probes import Column, Context, Result

KEY = "position_grid_correlation"


def track(model: nn.Module, images: Tensor, ctx: Context) -> dict[str, float]:
    """Needs no images: one (N, D) matmul and a sort of the N (N - 1) / 2 pairs."""
    return {KEY: grid_correlation(position_similarity(patch_position_embeddings(model)), ctx.grid)}


def run(model: nn.Module, images: Tensor, labels: Tensor, ctx: Context) -> Result:
    similarity = position_similarity(patch_position_embeddings(model))  # (N, N)
    figure = plot_position_similarity(similarity, ctx.grid, title=f"{ctx.rung}: learned position embeddings")
    return Result(figures={"position_similarity": figure}, scalars={KEY: grid_correlation(similarity, ctx.grid)})


def columns() -> tuple[Column, ...]:
    return (Column(KEY, "position embeddings: ρ(similarity, distance)", digits=2, track=KEY),)
