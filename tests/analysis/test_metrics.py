"""Known answers for the attention metrics (docs/design.md §4 pins these numbers)."""

from __future__ import annotations

import math

import pytest
import torch
from synthetic_heads import attention_tensor, head_row

from vitladder.analysis.figures import EXPLAINER_PATCH
from vitladder.analysis.metrics import (
    METRICS,
    attention_entropy,
    attention_rollout,
    cls_share,
    grid_from_tokens,
    mean_attention_distance,
    patch_centers,
    patch_distances,
    uniform_distance,
)

SQRT2 = math.sqrt(2.0)


def query_distance(row: torch.Tensor, grid: int, patch_px: float, query: int) -> float:
    """Distance of one patch query, computed with the library's own distance matrix."""
    return float((row * patch_distances(grid, patch_px)[query]).sum())


# --- geometry ---------------------------------------------------------------------------


def test_patch_centers_row_major() -> None:
    centers = patch_centers(8, 4)
    assert centers.shape == (64, 2)
    assert centers[0].tolist() == [2.0, 2.0]
    assert centers[1].tolist() == [6.0, 2.0]  # next column: x moves
    assert centers[8].tolist() == [2.0, 6.0]  # next row: y moves
    assert centers[2 * 8 + 3].tolist() == [14.0, 10.0]  # row 2, column 3


def test_patch_distances() -> None:
    dist = patch_distances(8, 4)
    assert dist.shape == (64, 64)
    assert torch.equal(dist.diagonal(), torch.zeros(64))
    assert torch.allclose(dist, dist.T)
    assert dist[0, 1].item() == pytest.approx(4.0)
    assert dist[0, 9].item() == pytest.approx(4 * SQRT2)
    assert dist[0, 63].item() == pytest.approx(28 * SQRT2)


@pytest.mark.parametrize("tokens, grid", [(65, 8), (17, 4), (2, 1)])
def test_grid_from_tokens(tokens: int, grid: int) -> None:
    assert grid_from_tokens(tokens) == grid


@pytest.mark.parametrize("tokens", [64, 66, 1, 0])
def test_grid_from_tokens_rejects_non_square(tokens: int) -> None:
    with pytest.raises(ValueError, match="perfect square"):
        grid_from_tokens(tokens)


def test_metrics_reject_bad_shapes() -> None:
    with pytest.raises(ValueError, match=r"\(B, H, T, T\)"):
        mean_attention_distance(torch.ones(2, 65, 65), 4)
    with pytest.raises(ValueError, match="perfect square"):
        attention_entropy(torch.ones(1, 1, 64, 64) / 64)


# --- uniform references (docs/design.md §4) -----------------------------------------------------


@pytest.mark.parametrize("grid, patch_px, expected, exact", [(8, 4, 16.5, 16.5459), (4, 8, 16.1, 16.0641)])
def test_uniform_distance(grid: int, patch_px: float, expected: float, exact: float) -> None:
    assert uniform_distance(grid, patch_px) == pytest.approx(expected, abs=0.05)
    assert uniform_distance(grid, patch_px) == pytest.approx(exact, abs=1e-3)
    attn = attention_tensor(["uniform"] * 3, grid, cls_weight=0.2)  # (1, 3, T, T)
    got = mean_attention_distance(attn, patch_px)
    assert got.shape == (3,)
    assert torch.allclose(got, torch.full((3,), exact), atol=1e-3)


def test_uniform_distance_of_explainer_patch() -> None:
    row, col = EXPLAINER_PATCH
    uniform = head_row("uniform", 8, row, col)
    got = query_distance(uniform, 8, 4, row * 8 + col)
    assert got == pytest.approx(13.3, abs=0.05)
    # Written out independently of the library: mean distance to all 64 centres, 4 px apart.
    by_hand = sum(4 * math.hypot(r - row, c - col) for r in range(8) for c in range(8)) / 64
    assert got == pytest.approx(by_hand, abs=1e-4)
    assert by_hand == pytest.approx(13.2514, abs=1e-3)


@pytest.mark.parametrize("grid, patch_px, expected", [(8, 4, 16.29), (4, 8, 15.12)])
def test_uniform_distance_cls_dropped(grid: int, patch_px: float, expected: float) -> None:
    """Uniform attention over the 1 + N tokens holds N / (N + 1) of itself on the patch keys (README: 16.29, 15.1)."""
    uniform = next(metric.uniform for metric in METRICS if metric.name == "distance_drop_px")
    assert uniform(grid, patch_px) == pytest.approx(expected, abs=0.005)
    attn = attention_tensor(["uniform"], grid, cls_weight=1 / (1 + grid * grid))  # (1, 1, T, T) uniform over T
    assert mean_attention_distance(attn, patch_px, "drop").item() == pytest.approx(uniform(grid, patch_px), abs=1e-4)


@pytest.mark.parametrize("grid, tokens, expected", [(8, 65, 4.17), (4, 17, 2.83)])
def test_uniform_entropy(grid: int, tokens: int, expected: float) -> None:
    uniform = {metric.name: metric.uniform for metric in METRICS}
    assert uniform["entropy_nats"](grid, 4) == pytest.approx(math.log(tokens))
    assert uniform["entropy_nats"](grid, 4) == pytest.approx(expected, abs=0.005)
    attn = torch.full((2, 6, tokens, tokens), 1.0 / tokens)  # uniform over all T keys
    assert torch.allclose(attention_entropy(attn), torch.full((6,), math.log(tokens)), atol=1e-5)
    assert torch.allclose(cls_share(attn), torch.full((6,), 1.0 / tokens))
    assert torch.allclose(
        mean_attention_distance(attn, 32 / grid), torch.full((6,), uniform_distance(grid, 32 / grid)), atol=1e-3
    )


# --- synthetic heads --------------------------------------------------------------------


def test_one_hot_self() -> None:
    attn = attention_tensor(["self"], 8)
    assert mean_attention_distance(attn, 4).item() == 0.0
    assert attention_entropy(attn).item() == 0.0
    assert cls_share(attn).item() == 0.0


def test_local_head_interior_patch() -> None:
    row, col = EXPLAINER_PATCH
    local = head_row("local", 8, row, col)
    assert int((local > 0).sum()) == 8
    # 4 edge neighbours at 4 px, 4 diagonal ones at 4*sqrt(2) px.
    expected = (4 * 4.0 + 4 * 4 * SQRT2) / 8
    assert expected == pytest.approx(2 + 2 * SQRT2)
    assert query_distance(local, 8, 4, row * 8 + col) == pytest.approx(expected, abs=1e-5)
    assert 4.0 < expected < 4 * SQRT2


def test_local_head_whole_grid() -> None:
    attn = attention_tensor(["local"], 8)
    # Written out independently: 4 corners (2 at 4 px, 1 diagonal), 24 edge patches
    # (3 at 4 px, 2 diagonal), 36 interior ones (4 at 4 px, 4 diagonal).
    d = 4 * SQRT2
    corner, edge, interior = (2 * 4 + d) / 3, (3 * 4 + 2 * d) / 5, (4 * 4 + 4 * d) / 8
    expected_dist = (4 * corner + 24 * edge + 36 * interior) / 64
    expected_ent = (4 * math.log(3) + 24 * math.log(5) + 36 * math.log(8)) / 64
    assert mean_attention_distance(attn, 4).item() == pytest.approx(expected_dist, abs=1e-5)
    assert attention_entropy(attn).item() == pytest.approx(expected_ent, abs=1e-5)
    # Interior queries alone have entropy ln 8 (rows of the (T, T) map, patch queries only).
    rows = attn[0, 0, 1:].reshape(8, 8, 65)[1:-1, 1:-1].reshape(36, 65)  # (36, T)
    ent = -torch.special.xlogy(rows, rows).sum(-1)
    assert torch.allclose(ent, torch.full((36,), math.log(8)), atol=1e-5)


def test_far_head() -> None:
    row, col = EXPLAINER_PATCH
    far = head_row("far", 8, row, col)
    assert int((far > 0).sum()) == 3
    # The farthest patch from (2, 3) is the corner (7, 7): 5 rows and 4 columns away.
    assert far[7 * 8 + 7] == pytest.approx(1 / 3)
    # Ties at 5 rows and 3 columns away break towards the lower index: (7, 0) and (7, 6).
    assert set(far.nonzero().flatten().tolist()) == {7 * 8 + 7, 7 * 8 + 0, 7 * 8 + 6}
    expected = 4 * (math.sqrt(41) + 2 * math.sqrt(34)) / 3
    assert query_distance(far, 8, 4, row * 8 + col) == pytest.approx(expected, abs=1e-4)
    attn = attention_tensor(["uniform", "local", "far", "self"], 8)
    dist, ent = mean_attention_distance(attn, 4), attention_entropy(attn)
    assert dist[2] > dist[0] > dist[1] > dist[3] == 0  # far > uniform > local > self
    assert ent[2].item() == pytest.approx(math.log(3), abs=1e-5)
    assert ent[3] < ent[2] < ent[1] < ent[0]  # far is lower than local
    assert dist[2].item() > 25.0  # far heads look across most of the 32 px image


# --- CLS share and conventions ----------------------------------------------------------


def test_cls_share_and_conventions() -> None:
    attn = attention_tensor(["uniform", "local", "far"], 8, cls_weight=0.3)
    assert torch.allclose(cls_share(attn), torch.full((3,), 0.3))
    renorm = mean_attention_distance(attn, 4)
    dropped = mean_attention_distance(attn, 4, cls_convention="drop")
    # Renormalising undoes the CLS share exactly; dropping keeps the 0.7 patch share.
    assert torch.allclose(
        renorm, mean_attention_distance(attention_tensor(["uniform", "local", "far"], 8), 4), atol=1e-5
    )
    assert torch.allclose(dropped, 0.7 * renorm, atol=1e-5)
    # Entropy over all T keys counts CLS: 0.3 on CLS + 0.7 spread over 8 neighbours.
    row, col = EXPLAINER_PATCH
    q = 1 + row * 8 + col
    keys = attn[0, 1, q]
    expected = -(0.3 * math.log(0.3) + 0.7 * math.log(0.7 / 8))
    assert float(-torch.special.xlogy(keys, keys).sum()) == pytest.approx(expected, abs=1e-5)
    with pytest.raises(ValueError, match="cls_convention"):
        mean_attention_distance(attn, 4, cls_convention="keep")  # type: ignore[arg-type]


def test_metrics_average_over_batch_and_queries() -> None:
    a = attention_tensor(["self"], 4)
    b = attention_tensor(["uniform"], 4)
    both = torch.cat([a, b])  # (2, 1, 17, 17)
    assert mean_attention_distance(both, 8).item() == pytest.approx(uniform_distance(4, 8) / 2, abs=1e-4)
    assert attention_entropy(both).item() == pytest.approx(math.log(16) / 2, abs=1e-5)


def test_all_cls_query_counts_as_zero_distance() -> None:
    attn = attention_tensor(["uniform"], 4, cls_weight=1.0)
    assert mean_attention_distance(attn, 8).item() == 0.0
    assert cls_share(attn).item() == 1.0


def test_metrics_equal_their_definitions_written_out() -> None:
    # Random maps with exact zeros (sparse rows, one all-CLS query) against the docs/design.md formulas in float64.
    generator = torch.Generator().manual_seed(0)
    attn = torch.rand(3, 2, 17, 17, generator=generator, dtype=torch.float64)
    attn[attn < 0.4] = 0.0
    attn[0, 1, 5] = 0.0
    attn[0, 1, 5, 0] = 1.0  # a query wholly on CLS: distance 0
    attn = attn / attn.sum(dim=-1, keepdim=True)  # (B, H, T, T) rows sum to 1
    dist = patch_distances(4, 8).double()  # (N, N)
    patches = attn[:, :, 1:, 1:]  # (B, H, N, N)
    mass = patches.sum(dim=-1, keepdim=True)
    renormalised = torch.where(mass > 0, patches / mass, 0.0)
    expected_distance = (renormalised * dist).sum(dim=-1).mean(dim=(0, 2))  # (H,)
    expected_drop = (patches * dist).sum(dim=-1).mean(dim=(0, 2))
    rows = attn[:, :, 1:, :]
    expected_entropy = -torch.special.xlogy(rows, rows).sum(dim=-1).mean(dim=(0, 2))
    torch.testing.assert_close(mean_attention_distance(attn, 8).double(), expected_distance, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mean_attention_distance(attn, 8, "drop").double(), expected_drop, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(attention_entropy(attn).double(), expected_entropy, rtol=1e-5, atol=1e-5)


# --- rollout ----------------------------------------------------------------------------


def test_rollout_one_uniform_layer() -> None:
    t = 65
    attn = torch.full((2, 6, t, t), 1.0 / t)
    rollout = attention_rollout([attn])
    assert rollout.shape == (2, 64)
    # Â = 0.5 U + 0.5 I: the CLS row gives 0.5/T to each patch.
    assert torch.allclose(rollout, torch.full((2, 64), 0.5 / t))


def test_rollout_two_uniform_layers() -> None:
    t = 17
    attn = torch.full((1, 6, t, t), 1.0 / t)
    # (0.5 U + 0.5 I)^2 = 0.75 U + 0.25 I since U @ U = U.
    assert torch.allclose(attention_rollout([attn, attn]), torch.full((1, 16), 0.75 / t))


def test_rollout_identity_attention_stays_on_cls() -> None:
    eye = torch.eye(17).expand(1, 6, 17, 17)
    assert torch.allclose(attention_rollout([eye, eye, eye]), torch.zeros(1, 16))


def test_rollout_matches_explicit_matrix_product() -> None:
    gen = torch.Generator().manual_seed(0)
    first = torch.rand(3, 6, 17, 17, generator=gen).softmax(-1)
    second = torch.rand(3, 6, 17, 17, generator=gen).softmax(-1)
    eye = torch.eye(17, dtype=torch.float64)

    def mix(a: torch.Tensor) -> torch.Tensor:
        m = 0.5 * a.double().mean(1) + 0.5 * eye
        return m / m.sum(-1, keepdim=True)

    expected = torch.stack([mix(second)[b] @ mix(first)[b] for b in range(3)])  # last @ first
    got = attention_rollout([first, second])
    assert torch.allclose(got.double(), expected[:, 0, 1:], atol=1e-6)
    # Order matters: the reverse product is a different map.
    reverse = torch.stack([mix(first)[b] @ mix(second)[b] for b in range(3)])
    assert not torch.allclose(got.double(), reverse[:, 0, 1:], atol=1e-6)
    assert torch.all(got >= 0) and torch.all(got.sum(-1) <= 1 + 1e-6)
    # Rows of R sum to 1, so the CLS row over the patches sums to 1 - R[0, 0].
    full = mix(second) @ mix(first)
    assert torch.allclose(got.sum(-1).double(), 1 - full[:, 0, 0], atol=1e-6)


def test_rollout_renormalises_rows() -> None:
    # With true probabilities 0.5 Ā + 0.5 I already has unit rows; rows that do not sum
    # to 1 must be put back on the simplex: 0.5 (2A) + 0.5 I = A + 0.5 I, over 1.5.
    attn = torch.rand(2, 6, 17, 17, generator=torch.Generator().manual_seed(3)).softmax(-1)
    expected = (2 / 3) * attn.mean(1)[:, 0, 1:]  # (B, N): the identity adds nothing off the diagonal
    assert torch.allclose(attention_rollout([2 * attn]), expected, atol=1e-6)
