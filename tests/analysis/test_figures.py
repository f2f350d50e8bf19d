"""The explainer figure's three made-up heads: their rows and the numbers their titles show (docs/design.md §4)."""

from __future__ import annotations

import math

import pytest
import torch
from synthetic_heads import head_row

from vitladder.analysis.figures import EXPLAINER_PATCH, explainer_rows, plot_explainer


def test_the_rows_spread_over_the_neighbours_the_farthest_three_and_every_patch() -> None:
    rows = explainer_rows(8, 0, 7)  # a corner: 3 neighbours
    assert rows["local"].nonzero().flatten().tolist() == [6, 14, 15] and rows["local"].sum().item() == pytest.approx(1)
    assert rows["far"].nonzero().flatten().tolist() == [48, 56, 57]  # (7, 0), then (6, 0) and (7, 1), tied
    assert torch.equal(rows["uniform"], torch.full((64,), 1 / 64))


def test_the_titles_give_each_heads_distance_and_entropy() -> None:
    titles = [ax.get_title() for ax in plot_explainer().axes]
    row, col = EXPLAINER_PATCH
    far = 4 * (math.sqrt(41) + 2 * math.sqrt(34)) / 3  # test_metrics.test_far_head
    assert titles == [
        f"local\n{2 + 2 * math.sqrt(2):.1f} px, {math.log(8):.2f} nats",  # 4 neighbours at 4 px, 4 at 4 * sqrt(2)
        f"focused but far\n{far:.1f} px, {math.log(3):.2f} nats",
        f"uniform\n13.3 px, {math.log(64):.2f} nats",  # docs/design.md §4: 13.3 px for this patch alone
    ]
    assert torch.equal(
        head_row("self", 8, row, col), torch.nn.functional.one_hot(torch.tensor(row * 8 + col), 64).float()
    )
