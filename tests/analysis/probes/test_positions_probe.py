"""The position-embedding probe: grid-like embeddings read strongly negative, the same number tracked and at the
end, and its figure."""

from __future__ import annotations

import torch
from timm.layers import build_sincos2d_pos_embed

from vitladder.analysis.probes import Context, run_probes, track_probes
from vitladder.data.sources.cifar10 import STATS as CIFAR10_STATS
from vitladder.model import ViTConfig, build_vit


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
