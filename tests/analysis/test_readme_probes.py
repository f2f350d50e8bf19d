"""The README's known answers for the position-embedding probe are what the project's code measures."""

from __future__ import annotations

import re
from pathlib import Path

import torch
from timm.layers import build_sincos2d_pos_embed

from vitladder.analysis.probes.positions import grid_correlation, position_similarity

README = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text().split())  # sentences wrap anywhere


def said(pattern: str) -> tuple[str, ...]:
    found = re.search(pattern, README)
    assert found, f"the README no longer says: {pattern}"
    return found.groups()


def shown(value: float, decimals: int) -> str:
    return f"{value:.{decimals}f}".replace("-", "−")  # the README writes a minus sign


def test_sinusoidal_embeddings_give_the_readmes_correlations() -> None:
    values = said(
        r"on the 8×8 grid give (\S+) at width 384 and (\S+) at width 48; "
        r"on the 4×4 grid (\S+) at width 384 and (\S+) at width 48;"
    )
    for value, (grid, dim) in zip(values, [(8, 384), (8, 48), (4, 384), (4, 48)]):
        embeddings = build_sincos2d_pos_embed([grid, grid], dim=dim)  # (N, D), row-major like the patches
        rho = grid_correlation(position_similarity(embeddings), grid)
        # The README's two decimals, give or take float32's rounding: the grid's pairs that are equal in exact
        # arithmetic rank by their last bits, which differ between CPUs' kernels (4x4 at 384: exactly -0.98485,
        # -0.9849 on one CPU, below -0.985 on another).
        assert abs(rho - float(value.replace("−", "-"))) <= 0.005 + 1e-3, (grid, dim, rho)


def test_random_embeddings_give_the_readmes_spread() -> None:
    mean, std, draws, dim = said(r"average (\S+) and standard deviation (\S+) over (\d+) seeded draws at width (\d+)")
    generator = torch.Generator().manual_seed(0)
    rhos = torch.tensor(
        [
            grid_correlation(position_similarity(torch.randn(64, int(dim), generator=generator)), 8)
            for _ in range(int(draws))
        ]
    )
    assert shown(abs(rhos.mean().item()), 2) == mean and shown(rhos.std().item(), 3) == std
