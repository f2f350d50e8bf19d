"""Synthetic attention heads with known answers, for the tests: the explainer figure's three heads
(``figures.explainer_rows``: local, far, uniform) and ``self``, all attention on the query's own patch.

A *row* is one patch query's attention over the ``N = g*g`` patches (no CLS), ``(N,)``. ``attention_tensor`` stacks
rows into a full ``(1, H, T, T)`` attention with a CLS token, one head per kind, every patch query its own row.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from vitladder.analysis.figures import explainer_rows


def head_row(kind: str, grid: int, row: int, col: int) -> Tensor:
    """The ``(N,)`` row of one head kind for the query patch at (row, col)."""
    own = torch.zeros(grid * grid)
    own[row * grid + col] = 1.0
    return {**explainer_rows(grid, row, col), "self": own}[kind]


def attention_tensor(kinds: Sequence[str], grid: int, cls_weight: float = 0.0) -> Tensor:
    """Full attention ``(1, H, T, T)`` with one head per kind, ``T = 1 + grid*grid``: every patch query puts
    ``cls_weight`` on the CLS token and the rest on the patches, shaped like its kind's row. The CLS query's row is
    uniform (the metrics ignore it; rollout uses it)."""
    num_tokens = grid * grid + 1
    heads = torch.empty(len(kinds), num_tokens, num_tokens)  # (H, T, T)
    heads[:, 0] = 1.0 / num_tokens
    heads[:, 1:, 0] = cls_weight
    for h, kind in enumerate(kinds):
        for q in range(grid * grid):
            heads[h, 1 + q, 1:] = (1.0 - cls_weight) * head_row(kind, grid, q // grid, q % grid)
    return heads.unsqueeze(0)  # (1, H, T, T)
