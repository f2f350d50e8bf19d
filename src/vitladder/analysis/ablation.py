"""The head-ablation probe: do the local heads matter? (docs/design.md §4; the mechanism: ``head_removal.py``.)

For each head, accuracy and loss on the analysis images with the head removed (mean and uniform
ablation); for each layer its more local half of heads against its less local half; across the model
the ``k`` most local heads against ``k`` random ones (several seeded draws) and the ``k`` least local.
Then, per mode, Spearman's rho between a head's mean attention distance and the accuracy its removal
costs, with a bootstrap 95% interval over images. Negative: the more local a head, the more it costs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from matplotlib import colormaps
from matplotlib.figure import Figure
from torch import Tensor, nn

from vitladder.analysis.correlation import spearman
from vitladder.analysis.head_removal import MODES, Ablation, Mode, ablate

__all__ = ["KS", "HeadAblationResult", "ablation_plan", "bootstrap_spearman", "head_ablation", "plot_ablation"]

KS = (3, 6)  # model-wide groups: the k most local, least local and random heads


def _mask(shape: tuple[int, int], flat_indices: Tensor) -> Tensor:
    mask = torch.zeros(shape[0] * shape[1], dtype=torch.bool)
    mask[flat_indices] = True
    return mask.view(shape)  # (L, H)


def ablation_plan(
    distance: Tensor, ks: Sequence[int] = KS, draws: int = 5, seed: int = 0, modes: Sequence[Mode] = MODES
) -> tuple[Ablation, ...]:
    """Every ablation of the probe, per mode: each head; per layer its more local half of heads and its less
    local half (``H // 2`` each, by ``distance`` ``(L, H)``, the mean attention distance); across the model the
    ``k`` most local heads, ``draws`` seeded random sets of ``k`` (the same sets in every mode) and the ``k``
    least local. A ``k`` above the number of heads is left out."""
    num_layers, num_heads = shape = tuple(distance.shape)
    flat = distance.detach().cpu().flatten()
    by_locality = flat.argsort(stable=True)  # (L*H,) most local first
    generator = torch.Generator().manual_seed(seed)
    random_sets = {(k, d): torch.randperm(flat.numel(), generator=generator)[:k] for k in ks for d in range(draws)}
    plan: list[Ablation] = []
    for mode in modes:
        plan += [Ablation("head", mode, _mask(shape, torch.tensor([i]))) for i in range(flat.numel())]
        half = num_heads // 2
        for layer in range(num_layers if half else 0):
            order = layer * num_heads + distance[layer].detach().cpu().argsort(stable=True)  # (H,) most local first
            plan.append(Ablation("local_half", mode, _mask(shape, order[:half])))
            plan.append(Ablation("nonlocal_half", mode, _mask(shape, order[-half:])))
        for k in (k for k in ks if 0 < k <= flat.numel()):
            plan.append(Ablation("most_local", mode, _mask(shape, by_locality[:k])))
            plan += [Ablation("random", mode, _mask(shape, random_sets[k, d]), draw=d) for d in range(draws)]
            plan.append(Ablation("least_local", mode, _mask(shape, by_locality[-k:])))
    return tuple(plan)


def bootstrap_spearman(
    distance: Tensor, clean_correct: Tensor, correct: Tensor, resamples: int = 1000, seed: int = 0, level: float = 0.95
) -> tuple[float, float, float]:
    """Spearman's rho between the heads' ``distance`` ``(n,)`` and the accuracy their ablation costs, with a
    percentile bootstrap interval over images: ``(rho, low, high)``.

    ``clean_correct`` ``(N,)`` and ``correct`` ``(n, N)`` say, per image, whether the clean and each ablated
    model got it right. Each resample draws ``N`` images with replacement (seeded) and recomputes every head's
    accuracy drop and rho; resamples where rho is undefined (all drops tied) are left out of the interval.
    """
    clean, ablated = clean_correct.double(), correct.double()  # (N,), (n, N)
    num_images = clean.numel()
    rho = float(spearman(distance, clean.mean() - ablated.mean(dim=1)))
    generator = torch.Generator().manual_seed(seed)
    drawn = torch.randint(num_images, (resamples, num_images), generator=generator)  # (R, N) image indices
    counts = torch.zeros(resamples, num_images, dtype=torch.float64)  # (R, N) how often each image was drawn
    counts.scatter_add_(1, drawn, torch.ones(drawn.shape, dtype=torch.float64))
    drops = (counts @ clean)[:, None] / num_images - counts @ ablated.T / num_images  # (R, n) exact counts / N
    rhos = spearman(distance.double().expand(resamples, -1), drops)  # (R,)
    tail = (1 - level) / 2
    low, high = torch.nanquantile(rhos, torch.tensor([tail, 1 - tail], dtype=torch.float64)).tolist()
    return rho, low, high


# --- the probe's result ----------------------------------------------------------------------------


@dataclass(frozen=True)
class HeadAblationResult:
    """Accuracy and loss under every ablation of ``ablation_plan``, and the distance-cost correlation per mode."""

    ablations: tuple[Ablation, ...]
    accuracy: Tensor  # (A,) float64
    loss: Tensor  # (A,) float32
    clean_accuracy: float
    clean_loss: float
    num_images: int
    distance: Tensor  # (L, H) mean attention distance the plan ranked heads by
    spearman: Mapping[Mode, tuple[float, float, float]]  # mode -> (rho, low, high) of distance vs accuracy drop

    def per_head(self, mode: Mode) -> tuple[Tensor, Tensor]:
        """Accuracy and loss with each single head removed, ``(L, H)`` each."""
        index = [i for i, a in enumerate(self.ablations) if a.group == "head" and a.mode == mode]
        shape = self.distance.shape
        return self.accuracy[index].view(shape), self.loss[index].view(shape)

    def rows(self) -> list[dict[str, object]]:
        """One row per ablation (for ``ablation.csv``): layer/head where it is one head, or one layer's half."""
        rows = []
        for ablation, accuracy, loss in zip(self.ablations, self.accuracy.tolist(), self.loss.tolist()):
            layers = ablation.heads.any(dim=1).nonzero().flatten().tolist()
            rows.append(
                {
                    "mode": ablation.mode,
                    "group": ablation.group,
                    "layer": layers[0] if len(layers) == 1 else None,
                    "head": int(ablation.heads.nonzero()[0, 1]) if ablation.size == 1 else None,
                    "num_heads": ablation.size,
                    "draw": ablation.draw,
                    "heads": ablation.label,
                    "accuracy": accuracy,
                    "loss": loss,
                    "accuracy_drop_pts": 100 * (self.clean_accuracy - accuracy),
                }
            )
        return rows

    def drops(self, group: str, mode: Mode, size: int) -> Tensor:
        """Accuracy lost (pts) under each ablation of ``group`` removing ``size`` heads in ``mode``, ``(draws,)``."""
        index = [i for i, a in enumerate(self.ablations) if (a.group, a.mode, a.size) == (group, mode, size)]
        return 100 * (self.clean_accuracy - self.accuracy[index])

    def scalars(self) -> dict[str, float]:
        """The headline numbers: ``clean_accuracy``; per mode the drop (pts) without the k most and least local
        heads, the random draws' mean and sample std (NaN for one draw), and Spearman's rho with its interval."""
        out = {"clean_accuracy": self.clean_accuracy}
        for mode, (rho, low, high) in self.spearman.items():
            for k in sorted({a.size for a in self.ablations if a.group == "most_local" and a.mode == mode}):
                out[f"{mode}/most_local_{k}_drop_pts"] = float(self.drops("most_local", mode, k)[0])
                random = self.drops("random", mode, k)
                if len(random):
                    out[f"{mode}/random_{k}_drop_pts_mean"] = float(random.mean())
                    out[f"{mode}/random_{k}_drop_pts_std"] = float(random.std()) if len(random) > 1 else float("nan")
                out[f"{mode}/least_local_{k}_drop_pts"] = float(self.drops("least_local", mode, k)[0])
            out |= {f"{mode}/spearman": rho, f"{mode}/spearman_low": low, f"{mode}/spearman_high": high}
        return out


def head_ablation(
    model: nn.Module,
    images: Tensor,
    labels: Tensor,
    distance: Tensor,
    ks: Sequence[int] = KS,
    draws: int = 5,
    seed: int = 0,
    modes: Sequence[Mode] = MODES,
    batch_size: int = 250,
    stack: int = 6,
    resamples: int = 1000,
) -> HeadAblationResult:
    """The head-ablation probe on ``images`` ``(N, 3, H, W)`` (normalised, any device) with ``labels`` ``(N,)``,
    heads ranked by ``distance`` ``(L, H)`` (mean attention distance over the same images): ``ablation_plan``,
    ``ablate``, and per mode ``bootstrap_spearman`` over the single-head ablations (seeded by ``seed``)."""
    plan = ablation_plan(distance, ks, draws, seed, modes)
    outcomes = ablate(model, images, labels, plan, batch_size, stack)
    spearmans = {}
    for mode in modes:
        index = [i for i, a in enumerate(plan) if a.group == "head" and a.mode == mode]
        spearmans[mode] = bootstrap_spearman(
            distance.detach().cpu().flatten(), outcomes.clean_correct, outcomes.correct[index], resamples, seed
        )
    return HeadAblationResult(
        ablations=plan,
        accuracy=outcomes.correct.double().mean(dim=1),
        loss=outcomes.loss.mean(dim=1),
        clean_accuracy=float(outcomes.clean_correct.double().mean()),
        clean_loss=float(outcomes.clean_loss.mean()),
        num_images=len(images),
        distance=distance.detach().cpu().float(),
        spearman=spearmans,
    )


def plot_ablation(result: HeadAblationResult, mode: Mode, title: str = "") -> Figure:
    """Accuracy lost (pts) by removing each head against its mean attention distance, coloured by layer."""
    accuracy, _ = result.per_head(mode)
    drops = 100 * (result.clean_accuracy - accuracy.numpy())  # (L, H)
    distance = result.distance.numpy()  # (L, H)
    cmap = colormaps["viridis"]
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    for layer in range(len(distance)):
        color = cmap(layer / max(len(distance) - 1, 1))
        ax.scatter(distance[layer], drops[layer], s=22, color=color, label=f"layer {layer}")
    ax.axhline(0.0, color="gray", lw=0.8)
    rho, low, high = result.spearman[mode]
    heading = f"{mode} ablation: Spearman {rho:+.2f} (95% CI {low:+.2f} to {high:+.2f}), {result.num_images} images"
    ax.set_title(f"{title}\n{heading}" if title else heading, fontsize=9, parse_math=False)
    ax.set(xlabel="mean attention distance of the head (px)", ylabel="accuracy lost without the head (pts)")
    ax.set_xlim(left=0.0)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    return fig
