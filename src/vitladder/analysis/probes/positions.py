"""Do the learned position embeddings (random at initialisation) learn the 2-D grid? (docs/design.md §4; Dosovitskiy
et al. 2021, Fig. 7.) Per run ``position_similarity.png`` and ``grid_correlation``, Spearman's rho between two patches'
similarity and their distance: strongly negative for a grid-like embedding, about 0 for random ones; cheap enough to
track from initialisation on.
"""

from __future__ import annotations

import numpy as np
import torch
from matplotlib import rc_context
from matplotlib.figure import Figure
from torch import Tensor, nn

from vitladder.analysis.correlation import spearman
from vitladder.analysis.figures import PLAIN_TEXT
from vitladder.analysis.metrics import patch_distances
from vitladder.analysis.probes import Column, Context, Result

KEY = "position_grid_correlation"


def patch_position_embeddings(model: nn.Module) -> Tensor:
    """The learned position embedding of each patch, ``(N, D)`` float32: timm's ``pos_embed`` ``(1, P + N, D)`` without
    its first ``P = num_prefix_tokens`` rows (the CLS and register tokens'), unless the model has ``no_embed_class``."""
    pos = getattr(model, "pos_embed", None)
    if not isinstance(pos, Tensor):
        raise ValueError("the model has no learned position embeddings (pos_embed) to compare")
    prefix = 0 if getattr(model, "no_embed_class", False) else int(getattr(model, "num_prefix_tokens", 0))
    return pos.detach()[0, prefix:].float()  # (N, D)


def position_similarity(embeddings: Tensor) -> Tensor:
    """Cosine similarity between every pair of patch embeddings ``(N, D)``, ``(N, N)``; a zero vector gives 0."""
    unit = torch.nn.functional.normalize(embeddings.float(), dim=-1)  # (N, D)
    return unit @ unit.T  # (N, N)


def grid_correlation(similarity: Tensor, grid: int) -> float:
    """Spearman's rho between the similarity of two patches and the distance between their centres, over the pairs
    ``i < j`` of the ``g x g`` grid (the pixel scale does not change ranks). NaN on a one-patch grid."""
    n = grid * grid
    if similarity.shape != (n, n):
        raise ValueError(f"expected a ({n}, {n}) similarity for a {grid}x{grid} grid, got {tuple(similarity.shape)}")
    if n < 3:  # one pair at most: no rank correlation
        return float("nan")
    i, j = torch.triu_indices(n, n, offset=1, device=similarity.device)  # (2, pairs)
    distance = patch_distances(grid, 1.0).to(similarity.device)[i, j]  # (pairs,)
    return float(spearman(similarity[i, j], distance))


@rc_context(PLAIN_TEXT)
def plot_position_similarity(similarity: Tensor, grid: int, title: str = "") -> Figure:
    """Fig. 7 of Dosovitskiy et al.: for each patch (row, column) its map of cosine similarity to every patch, at
    block (row, column) of one mosaic, the blocks apart by a blank line, on the fixed scale [-1, 1] (runs compare)."""
    maps = similarity.detach().float().cpu().reshape(grid, grid, grid, grid)  # (row, col, key row, key col)
    padded = torch.nn.functional.pad(maps, (0, 1, 0, 1), value=float("nan"))  # (g, g, g + 1, g + 1)
    side = grid + 1
    mosaic = padded.permute(0, 2, 1, 3).reshape(grid * side, grid * side)[:-1, :-1]  # (row, key row, col, key col)
    fig = Figure(figsize=(6.4, 5.6))
    ax = fig.add_subplot()
    image = ax.imshow(mosaic.numpy(), cmap="viridis", vmin=-1.0, vmax=1.0, interpolation="nearest")  # as Fig. 7
    centres = np.arange(grid) * side + (grid - 1) / 2
    ax.set_xticks(centres, [str(c + 1) for c in range(grid)])
    ax.set_yticks(centres, [str(r + 1) for r in range(grid)])
    ax.tick_params(length=0)
    ax.spines[:].set_visible(False)
    ax.set(xlabel="input patch column", ylabel="input patch row")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.03, label="cosine similarity")
    heading = f"Position embedding similarity (Spearman vs distance {grid_correlation(similarity, grid):+.2f})"
    ax.set_title(f"{title}\n{heading}" if title else heading)
    return fig


def track(model: nn.Module, images: Tensor, ctx: Context) -> dict[str, float]:
    """Needs no images."""
    return {KEY: grid_correlation(position_similarity(patch_position_embeddings(model)), ctx.grid)}


def run(model: nn.Module, images: Tensor, labels: Tensor, ctx: Context) -> Result:
    similarity = position_similarity(patch_position_embeddings(model))  # (N, N)
    figure = plot_position_similarity(similarity, ctx.grid, title=f"{ctx.rung}: learned position embeddings")
    return Result(figures={"position_similarity": figure}, scalars={KEY: grid_correlation(similarity, ctx.grid)})


def columns() -> tuple[Column, ...]:
    return (Column(KEY, "position embeddings: ρ(similarity, distance)", digits=2, track=KEY),)
