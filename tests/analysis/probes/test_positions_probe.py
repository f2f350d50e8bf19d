"""The position-embedding probe: cosine similarity and its rank correlation with patch distance (known answers),
the same number tracked and at the end, and its figure."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from timm.layers import build_sincos2d_pos_embed
from timm.models.vision_transformer import VisionTransformer

from vitladder.analysis.metrics import patch_distances
from vitladder.analysis.probes import Context, run_probes, track_probes
from vitladder.analysis.probes.positions import (
    grid_correlation,
    patch_position_embeddings,
    plot_position_similarity,
    position_similarity,
)
from vitladder.data.sources.cifar10 import STATS as CIFAR10_STATS
from vitladder.model import ViTConfig, build_vit

GRID = 8
PAIRS = GRID**2 * (GRID**2 - 1) // 2  # 2016 pairs i < j
NULL_SD = 1 / math.sqrt(PAIRS - 1)  # rho's spread for independent pairs; random embeddings' pairs are uncorrelated


def test_patch_embeddings_leave_out_the_cls_position() -> None:
    model = build_vit(ViTConfig(embed_dim=16, depth=1, num_heads=2))
    embeddings = patch_position_embeddings(model)
    assert embeddings.shape == (64, 16)
    assert torch.equal(embeddings, model.pos_embed[0, 1:].detach())
    no_cls_slot = VisionTransformer(img_size=32, patch_size=4, embed_dim=16, depth=1, num_heads=2, no_embed_class=True)
    assert torch.equal(patch_position_embeddings(no_cls_slot), no_cls_slot.pos_embed[0].detach())
    with pytest.raises(ValueError, match="pos_embed"):
        patch_position_embeddings(torch.nn.Linear(2, 2))


def test_cosine_similarity() -> None:
    embeddings = torch.tensor([[1.0, 0.0], [0.0, 2.0], [-3.0, 0.0], [1.0, 1.0]])
    similarity = position_similarity(embeddings)
    expected = torch.tensor(
        [[1, 0, -1, 0.5**0.5], [0, 1, 0, 0.5**0.5], [-1, 0, 1, -(0.5**0.5)], [0.5**0.5, 0.5**0.5, -(0.5**0.5), 1]]
    )
    torch.testing.assert_close(similarity, expected)


def test_similarity_that_falls_with_distance_gives_minus_one() -> None:
    distance = patch_distances(GRID, 4.0)  # (N, N)
    assert grid_correlation(torch.exp(-distance / 10), GRID) == pytest.approx(-1.0)
    assert grid_correlation(distance, GRID) == pytest.approx(1.0)
    shuffled = torch.randperm(GRID**2, generator=torch.Generator().manual_seed(0))
    assert abs(grid_correlation(-distance[shuffled][:, shuffled], GRID)) < 0.1  # patches out of place: no grid


@pytest.mark.parametrize("dim", [48, 384])  # the smoke width and the full width
def test_sinusoidal_2d_embeddings_are_strongly_grid_like(dim: int) -> None:
    embeddings = build_sincos2d_pos_embed([GRID, GRID], dim=dim)  # (N, D), row-major like the patches
    assert grid_correlation(position_similarity(embeddings), GRID) < -0.75


def test_random_embeddings_give_about_zero() -> None:
    generator = torch.Generator().manual_seed(0)
    one = grid_correlation(position_similarity(torch.randn(GRID**2, 384, generator=generator)), GRID)
    assert abs(one) < 4 * NULL_SD  # 4 standard deviations: 0.089
    rhos = torch.tensor(
        [grid_correlation(position_similarity(torch.randn(GRID**2, 48, generator=generator)), GRID) for _ in range(100)]
    )
    assert abs(rhos.mean().item()) < 4 * NULL_SD / 10  # the mean of 100 draws
    assert 0.75 * NULL_SD < rhos.std().item() < 1.33 * NULL_SD  # the spread the pair count predicts


def test_correlation_refuses_a_wrong_shape_and_has_none_on_one_patch() -> None:
    with pytest.raises(ValueError, match=r"\(64, 64\)"):
        grid_correlation(torch.eye(63), GRID)
    assert math.isnan(grid_correlation(torch.ones(1, 1), 1))


def test_figure_is_the_grid_of_per_patch_maps() -> None:
    similarity = position_similarity(build_sincos2d_pos_embed([4, 4], dim=32))  # (16, 16)
    fig = plot_position_similarity(similarity, 4, title=r"rung $\notacommand$")  # not maths: drawn as written
    FigureCanvasAgg(fig).draw()
    mosaic = fig.axes[0].images[0].get_array()
    assert mosaic.shape == (19, 19)  # 4 maps of 4 a side and 3 separating lines
    row, col = 2, 1  # the map of patch (2, 1) sits in block (2, 1)
    block = np.asarray(mosaic[row * 5 : row * 5 + 4, col * 5 : col * 5 + 4])
    np.testing.assert_allclose(block, similarity[row * 4 + col].view(4, 4).numpy(), rtol=1e-6)
    assert block[row, col] == pytest.approx(1.0)  # each patch is most like itself
    assert np.ma.getmaskarray(mosaic)[4].all() or np.isnan(np.asarray(mosaic.data)[4]).all()  # separators blank
    assert fig.axes[0].get_images()[0].get_clim() == (-1.0, 1.0)
    assert fig.axes[0].get_title().startswith("rung $\\notacommand$\n")


def test_sinusoidal_positions_read_as_a_grid_and_random_ones_do_not() -> None:
    torch.manual_seed(0)
    model = build_vit(ViTConfig(patch_size=4, embed_dim=64, depth=1, num_heads=2))  # an 8x8 grid, random start
    ctx = Context("patch4", 0, 4, 8, CIFAR10_STATS)
    images, labels = torch.zeros(2, 3, 32, 32, dtype=torch.uint8), torch.zeros(2, dtype=torch.long)
    random = track_probes(model, images, ctx, ["positions"])["position_grid_correlation"]
    with torch.no_grad():
        model.pos_embed[0, 1:] = build_sincos2d_pos_embed([8, 8], dim=64)  # (N, D), row-major like the patches
    result = run_probes(model, images, labels, ctx, ["positions"])["positions"]
    grid = result.scalars["position_grid_correlation"]
    assert abs(random) < 0.1 and grid < -0.75
    assert track_probes(model, images, ctx, ["positions"]) == {"position_grid_correlation": grid}
    assert (
        set(result.figures) == {"position_similarity"}
        and "patch4" in result.figures["position_similarity"].axes[0].get_title()
    )
