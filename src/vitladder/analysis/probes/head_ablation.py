"""Do the local heads matter? (docs/design.md §4; the mechanism: ``analysis/head_removal.py``.) Each head removed (mean
and uniform ablation), each layer's more local half of heads against its less local half, and the k most local heads
against k random ones and the k least local: ``ablation.csv``; per mode the accuracy lost against each head's mean
attention distance, and Spearman's rho between the two with a bootstrap 95% interval over images (negative: the more
local a head, the more its removal costs).

``analysis.settings.head_ablation`` may set ``images`` (the first N analysis images; default all), ``draws``
(random sets per k, 5) and ``resamples`` (bootstrap resamples, 1000): the smoke profile takes fewer.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from matplotlib import rc_context
from matplotlib.figure import Figure
from torch import Tensor, nn

from vitladder.analysis.correlation import spearman
from vitladder.analysis.figures import PLAIN_TEXT, layer_colors
from vitladder.analysis.head_removal import MODES, Ablation, Mode, ablate
from vitladder.analysis.probes import Chart, Column, Context, Result
from vitladder.analysis.summary import analyse, model_inputs

DEFAULTS = {"images": None, "draws": 5, "resamples": 1000}  # conf/config.yaml sets them; a bare Context has these
KS = (3, 6)  # model-wide groups: the k most local, least local and random heads
K = max(KS)  # the report's sentence: the 6 most local heads against 6 random ones


def _mask(shape: tuple[int, int], flat_indices: Tensor) -> Tensor:
    mask = torch.zeros(shape[0] * shape[1], dtype=torch.bool)
    mask[flat_indices] = True
    return mask.view(shape)  # (L, H)


def ablation_plan(
    distance: Tensor, ks: Sequence[int] = KS, draws: int = 5, seed: int = 0, modes: Sequence[Mode] = MODES
) -> tuple[Ablation, ...]:
    """Every ablation, per mode: each head; per layer its more local half of heads and its less local half
    (``H // 2`` each, by ``distance`` ``(L, H)``); across the model the ``k`` most local heads, ``draws`` seeded random
    sets of ``k`` (the same in every mode) and the ``k`` least local. A ``k`` above the number of heads is left out."""
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

    ``clean_correct`` ``(N,)`` and ``correct`` ``(n, N)`` say, per image, whether the clean and each ablated model got
    it right. Each resample draws ``N`` images with replacement (seeded) and recomputes every head's accuracy drop
    and rho; resamples where rho is undefined (all drops tied) are left out of the interval.
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
) -> tuple[list[dict], dict[str, float]]:
    """Every ablation of ``ablation_plan`` on ``images`` ``(N, 3, H, W)`` (normalised) with ``labels`` ``(N,)``, heads
    ranked by ``distance`` ``(L, H)``: ablation.csv's rows (a single head's with its distance) and the probe's
    scalars: the clean accuracy; per mode the drop (pts) without the k most and least local heads, the random draws'
    mean and sample std (NaN for one draw), and ``bootstrap_spearman`` over the single heads (seeded by ``seed``)."""
    plan = ablation_plan(distance, ks, draws, seed, modes)
    outcomes = ablate(model, images, labels, plan, batch_size, stack)
    distance = distance.detach().cpu()
    clean = float(outcomes.clean_correct.double().mean())
    accuracy = outcomes.correct.double().mean(dim=1)  # (A,)
    rows = []
    for ablation, acc, loss in zip(plan, accuracy.tolist(), outcomes.loss.mean(dim=1).tolist()):
        layers, heads = ablation.heads.any(dim=1).nonzero().flatten().tolist(), ablation.heads.nonzero().tolist()
        rows.append(
            {
                "mode": ablation.mode,
                "group": ablation.group,
                "layer": layers[0] if len(layers) == 1 else None,
                "head": heads[0][1] if len(heads) == 1 else None,
                "num_heads": len(heads),
                "draw": ablation.draw,
                "heads": ablation.label,
                "accuracy": acc,
                "loss": loss,
                "accuracy_drop_pts": 100 * (clean - acc),
                "distance_px": float(distance[tuple(heads[0])]) if ablation.group == "head" else None,
            }
        )

    def drops(group: str, mode: Mode, k: int) -> Tensor:  # (draws,) pts
        return 100 * (
            clean - accuracy[[i for i, a in enumerate(plan) if (a.group, a.mode, a.size) == (group, mode, k)]]
        )

    scalars = {"ablation_clean_accuracy": clean}
    for mode in modes:
        for k in sorted({a.size for a in plan if a.group == "most_local" and a.mode == mode}):
            scalars[f"ablation_{mode}_most_local_{k}_drop_pts"] = float(drops("most_local", mode, k)[0])
            random = drops("random", mode, k)
            if len(random):
                scalars[f"ablation_{mode}_random_{k}_drop_pts_mean"] = float(random.mean())
                scalars[f"ablation_{mode}_random_{k}_drop_pts_std"] = (
                    float(random.std()) if len(random) > 1 else float("nan")
                )
            scalars[f"ablation_{mode}_least_local_{k}_drop_pts"] = float(drops("least_local", mode, k)[0])
        single = [i for i, a in enumerate(plan) if a.group == "head" and a.mode == mode]
        rho = bootstrap_spearman(distance.flatten(), outcomes.clean_correct, outcomes.correct[single], resamples, seed)
        scalars |= dict(zip([f"ablation_{mode}_spearman{end}" for end in ("", "_low", "_high")], rho))
    return rows, scalars


@rc_context(PLAIN_TEXT)
def plot_ablation(rows: list[dict], scalars: dict[str, float], mode: Mode, num_images: int, title: str = "") -> Figure:
    """Accuracy lost (pts) by removing each head against its mean attention distance, coloured by layer."""
    single = [row for row in rows if row["group"] == "head" and row["mode"] == mode]
    num_layers = 1 + max(row["layer"] for row in single)
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    for layer, color in enumerate(layer_colors(num_layers)):
        mine = [row for row in single if row["layer"] == layer]
        x, y = [row["distance_px"] for row in mine], [row["accuracy_drop_pts"] for row in mine]
        ax.scatter(x, y, s=22, color=color, label=f"layer {layer}")
    ax.axhline(0.0, color="gray", lw=0.8)
    rho, low, high = (scalars[f"ablation_{mode}_spearman{end}"] for end in ("", "_low", "_high"))
    heading = f"{mode} ablation: Spearman {rho:+.2f} (95% CI {low:+.2f} to {high:+.2f}), {num_images} images"
    ax.set_title(f"{title}\n{heading}" if title else heading, fontsize=9)
    ax.set(xlabel="mean attention distance of the head (px)", ylabel="accuracy lost without the head (pts)")
    ax.set_xlim(left=0.0)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    return fig


def run(model: nn.Module, images: Tensor, labels: Tensor, ctx: Context) -> Result:
    settings = {**DEFAULTS, **ctx.settings.get("head_ablation", {})}
    images, labels = images[: settings["images"]], labels[: settings["images"]]
    distance = analyse(model, images, ctx.batch_size, ctx.patch_px, stats=ctx.stats).heads["distance_px"]  # (L, H)
    rows, scalars = head_ablation(
        model,
        model_inputs(model, images, ctx.stats),
        labels,
        distance,
        draws=int(settings["draws"]),
        seed=ctx.seed,
        batch_size=ctx.batch_size,
        resamples=int(settings["resamples"]),
    )
    title = f"{ctx.rung}: accuracy lost without each head"
    return Result(
        tables={"ablation": rows},
        figures={f"ablation_{mode}": plot_ablation(rows, scalars, mode, len(images), title) for mode in MODES},
        scalars=scalars,
        charts={"ablation_by_distance": Chart("ablation", "distance_px", "accuracy_drop_pts", title, "scatter")},
    )


# --- the ladder report ------------------------------------------------------------------------------------------


def _pts(value: float) -> str:
    return f"{round(-value, 1) + 0.0:+.1f}".replace("-", "−")  # a drop of 3.2 pts reads −3.2; none, +0.0


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _sentence(values) -> str:
    """report.md's cell: "without its 6 most local heads: −x pts; without 6 random heads: −y ± z pts", the means
    over seeds (± the spread over random draws), under mean ablation."""
    local, random = values(f"ablation_mean_most_local_{K}_drop_pts"), values(f"ablation_mean_random_{K}_drop_pts_mean")
    spread = values(f"ablation_mean_random_{K}_drop_pts_std")
    if not local or not random:
        return "—"
    z = f" ± {_mean(spread):.1f}" if spread else ""
    local, random = _pts(_mean(local)), _pts(_mean(random))
    return f"without its {K} most local heads: {local} pts; without {K} random heads: {random}{z} pts"


def _rho(values) -> str:
    rho, low, high = (values(f"ablation_mean_spearman{end}") for end in ("", "_low", "_high"))
    return f"{_mean(rho):+.2f} [{_mean(low):+.2f}, {_mean(high):+.2f}]" if rho and low and high else "—"


def columns() -> tuple[Column, ...]:
    """report.md: the mean-ablation sentence and Spearman's rho with its interval; ladder.csv: every number."""
    keys = ["ablation_clean_accuracy"]
    for mode in MODES:
        for k in KS:
            keys += [f"ablation_{mode}_{g}_{k}_drop_pts" for g in ("most_local", "least_local")]
            keys += [f"ablation_{mode}_random_{k}_drop_pts_{s}" for s in ("mean", "std")]
        keys += [f"ablation_{mode}_spearman{end}" for end in ("", "_low", "_high")]
    shown = [
        Column(f"ablation_mean_most_local_{K}_drop_pts", "head ablation (mean)", text=_sentence),
        Column("ablation_mean_spearman", "ρ(distance, accuracy lost), 95% CI", text=_rho),
    ]
    return (*shown, *(Column(key, digits=3) for key in keys if key not in {c.key for c in shown}))
