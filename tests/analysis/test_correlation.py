"""Spearman's rho in torch: ranks with ties averaged, as scipy.stats.spearmanr defines them."""

from __future__ import annotations

import math

import pytest
import torch

from vitladder.analysis.correlation import average_ranks, spearman


def test_ties_share_the_mean_of_their_ranks() -> None:
    assert average_ranks(torch.tensor([10.0, 30.0, 20.0, 30.0, 10.0, 30.0])).tolist() == [1.5, 5.0, 3.0, 5.0, 1.5, 5.0]
    assert average_ranks(torch.tensor([[3, 1, 2], [1, 1, 1]])).tolist() == [[3.0, 1.0, 2.0], [2.0, 2.0, 2.0]]


def test_known_values() -> None:
    x = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    assert spearman(x, x.exp()).item() == pytest.approx(1.0)  # any increasing map
    assert spearman(x, -(x**3)).item() == pytest.approx(-1.0)
    # ranks (1, 2.5, 2.5, 4) and (1, 3, 2, 4): centred (-1.5, 0, 0, 1.5), (-1.5, 0.5, -0.5, 1.5);
    # rho = 4.5 / sqrt(4.5 * 5) = sqrt(0.9)
    assert spearman(torch.tensor([1.0, 2, 2, 3]), torch.tensor([1.0, 3, 2, 4])).item() == pytest.approx(math.sqrt(0.9))
    # no rank difference larger than one swap: 1 - 6 * sum(d^2) / (n (n^2 - 1)) with d = (1, -1, 0, 0, 0)
    assert spearman(x, torch.tensor([2.0, 1, 3, 4, 5])).item() == pytest.approx(1 - 6 * 2 / (5 * 24))


def test_batched_constant_and_bad_input() -> None:
    x = torch.arange(6.0)
    batch = torch.stack([x, -x, torch.zeros(6)])  # (3, 6)
    rho = spearman(x.expand(3, -1), batch)
    assert rho[:2].tolist() == pytest.approx([1.0, -1.0]) and math.isnan(rho[2])  # a constant has no correlation
    assert rho.dtype == torch.float64
    with pytest.raises(ValueError, match="same length"):
        spearman(torch.ones(3), torch.ones(4))
