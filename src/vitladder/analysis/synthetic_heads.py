"""Synthetic attention heads with known answers, for the tests and the explainer figure.

A *row* is one patch query's attention over the ``N = g*g`` patches (no CLS), ``(N,)``.
``attention_tensor`` stacks rows into a full ``(1, H, T, T)`` attention tensor with a CLS
token, one head per kind, every patch query getting its own row of that kind.

Kinds:
- ``uniform``: the same weight on every patch;
- ``self``: all attention on the query's own patch (distance 0, entropy 0);
- ``local``: spread equally over the query's (up to 8) neighbouring patches;
- ``far``: spread equally over the few patches farthest from the query
  (large distance, low entropy).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

HeadKind = Literal["uniform", "self", "local", "far"]
HEAD_KINDS: tuple[HeadKind, ...] = ("uniform", "self", "local", "far")

EXPLAINER_GRID = 8
EXPLAINER_PATCH = (2, 3)  # (row, column) of the query patch drawn in the explainer figure
FAR_COUNT = 3  # patches a "far" head spreads over

__all__ = [
    "EXPLAINER_GRID",
    "EXPLAINER_PATCH",
    "FAR_COUNT",
    "HEAD_KINDS",
    "HeadKind",
    "attention_tensor",
    "far_row",
    "head_row",
    "local_row",
    "self_row",
    "uniform_row",
]


def _index(grid: int, row: int, col: int) -> int:
    if not (0 <= row < grid and 0 <= col < grid):
        raise ValueError(f"patch (row {row}, column {col}) is outside the {grid}x{grid} grid")
    return row * grid + col


def uniform_row(grid: int, row: int, col: int) -> Tensor:
    """Equal weight ``1/N`` on every patch, ``(N,)``."""
    _index(grid, row, col)
    return torch.full((grid * grid,), 1.0 / (grid * grid))


def self_row(grid: int, row: int, col: int) -> Tensor:
    """One-hot on the query's own patch, ``(N,)``."""
    out = torch.zeros(grid * grid)
    out[_index(grid, row, col)] = 1.0
    return out


def local_row(grid: int, row: int, col: int) -> Tensor:
    """Equal weight on the neighbouring patches (8 inside the grid, 5 on an edge, 3 in a corner)."""
    _index(grid, row, col)
    out = torch.zeros(grid, grid)
    out[max(row - 1, 0) : row + 2, max(col - 1, 0) : col + 2] = 1.0
    out[row, col] = 0.0
    out = out.flatten()  # (N,) row-major
    return out / out.sum()


def far_row(grid: int, row: int, col: int, count: int = FAR_COUNT) -> Tensor:
    """Equal weight on the ``count`` patches farthest from the query (ties: lower index first)."""
    query = _index(grid, row, col)
    index = torch.arange(grid * grid)
    dist2 = (index // grid - row) ** 2 + (index % grid - col) ** 2  # (N,) squared grid distance
    order = torch.sort(dist2, descending=True, stable=True).indices  # stable: deterministic ties
    out = torch.zeros(grid * grid)
    out[order[:count]] = 1.0 / count
    assert out[query] == 0.0
    return out


_ROWS = {"uniform": uniform_row, "self": self_row, "local": local_row, "far": far_row}


def head_row(kind: HeadKind, grid: int, row: int, col: int) -> Tensor:
    """The ``(N,)`` row of one head kind for the query patch at (row, col)."""
    if kind not in _ROWS:
        raise ValueError(f"unknown head kind {kind!r}; expected one of {HEAD_KINDS}")
    return _ROWS[kind](grid, row, col)


def attention_tensor(kinds: Sequence[HeadKind], grid: int, cls_weight: float = 0.0) -> Tensor:
    """Full attention ``(1, H, T, T)`` with one head per kind, ``T = 1 + grid*grid``.

    Every patch query puts ``cls_weight`` on the CLS token and ``1 - cls_weight`` on the
    patches, shaped like its kind's row. The CLS query row is uniform over all tokens
    (the metrics ignore it; rollout uses it).
    """
    if not 0.0 <= cls_weight <= 1.0:
        raise ValueError(f"cls_weight must lie in [0, 1], got {cls_weight}")
    num_patches = grid * grid
    num_tokens = num_patches + 1
    heads = []
    for kind in kinds:
        head = torch.empty(num_tokens, num_tokens)  # (T, T)
        head[0] = 1.0 / num_tokens
        head[1:, 0] = cls_weight
        for q in range(num_patches):
            head[1 + q, 1:] = (1.0 - cls_weight) * head_row(kind, grid, q // grid, q % grid)
        heads.append(head)
    return torch.stack(heads).unsqueeze(0)  # (1, H, T, T)
