"""Do the local heads matter? (docs/design.md §4.) ``ablation.csv``: each head removed, each layer's more local half
of heads and its less local half, the k most local heads, k random ones and the k least local; per mode the accuracy
lost against each head's mean attention distance, with Spearman's rho and a bootstrap 95% interval over images.
``analysis.settings.head_ablation``: ``images`` (the first N; default all), ``draws`` (5) and ``resamples`` (1000).

Forward hooks act per row of the batch, so several ablations run stacked in one batch. Mean ablation overwrites the
head's channels of the input of ``proj`` with their mean over the images at each token; uniform ablation zeroes the
head's queries at the output of ``q_norm``, so the softmax is exactly ``1 / T`` (the fused path keeps running).
tests/analysis/test_head_removal.py pins this layout of timm's ``Attention.forward`` against a hand-written one.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from typing import Literal

import torch
import torch.nn.functional as F
from matplotlib import colormaps, rc_context
from matplotlib.figure import Figure
from timm.layers.attention import Attention
from torch import Tensor, nn

from vitladder.analysis.capture import evaluating
from vitladder.analysis.correlation import spearman
from vitladder.analysis.figures import PLAIN_TEXT
from vitladder.analysis.probes import Chart, Column, Context, Result
from vitladder.analysis.summary import analyse, model_inputs

Mode = Literal["mean", "uniform"]
MODES: tuple[Mode, ...] = ("mean", "uniform")
DEFAULTS = {"images": None, "draws": 5, "resamples": 1000}  # conf/config.yaml sets them; a bare Context has these
KS = (3, 6)  # model-wide groups: the k most local, least local and random heads
K = max(KS)  # the report's sentence: the 6 most local heads against 6 random ones


def spearman_keys(mode: str) -> list[str]:
    """The scalars of Spearman's rho under ``mode`` ablation and its 95% interval: (rho, low, high)."""
    return [f"ablation_{mode}_spearman{end}" for end in ("", "_low", "_high")]


@dataclass(frozen=True, eq=False)
class Ablation:
    """Heads removed together, in one mode."""

    group: str  # "head", "local_half", "nonlocal_half", "most_local", "least_local" or "random"
    mode: Mode
    heads: Tensor  # (L, H) bool, True where removed
    draw: int | None = None  # which random draw

    @property
    def start(self) -> int:
        """The first layer with a removed head: the blocks below it run as in the clean model."""
        return int(self.heads.any(dim=1).nonzero()[0])

    @property
    def size(self) -> int:
        return int(self.heads.sum())

    @property
    def label(self) -> str:
        """The removed heads as ``layer.head``, e.g. ``"0.3 2.1"``."""
        return " ".join(f"{int(layer)}.{int(head)}" for layer, head in self.heads.nonzero())


def _batches(model: nn.Module, images: Tensor, batch_size: int) -> Iterator[Tensor]:
    param = next(model.parameters())
    for start in range(0, len(images), batch_size):
        yield images[start : start + batch_size].to(param.device, param.dtype, non_blocking=True)


def head_output_means(model: nn.Module, images: Tensor, batch_size: int) -> Tensor:
    """Each head's output averaged over ``images`` at each token, ``(L, T, H, head_dim)`` float32: what mean ablation
    puts in its place. The caller sets eval mode and no gradients."""
    sums: list[Tensor | float] = [0.0] * len(model.blocks)  # per layer (T, H * head_dim)

    def add(layer: int, _module: nn.Module, args: tuple[Tensor, ...]) -> None:
        sums[layer] = args[0].float().sum(dim=0) + sums[layer]

    with ExitStack() as hooks:  # each hook removed on leaving, also after an error
        for i, block in enumerate(model.blocks):
            hooks.enter_context(block.attn.proj.register_forward_pre_hook(partial(add, i)))
        for batch in _batches(model, images, batch_size):
            model(batch)
    attn = model.blocks[0].attn
    return (torch.stack(sums) / len(images)).unflatten(-1, (attn.num_heads, attn.head_dim))  # type: ignore[arg-type]


def ablated_logits(
    model: nn.Module, hidden: Tensor, start: int, ablations: Sequence[Ablation], head_means: Tensor | None = None
) -> Tensor:
    """Logits ``(A, B, C)`` from block ``start``'s input ``hidden`` ``(B, T, D)`` under each ablation, stacked in one
    batch: row ``a * B + b`` removes the heads of ``ablations[a]``. ``head_means`` (``head_output_means``) serve mean
    ablation. The caller sets eval mode and no gradients."""
    if any(a.start < start for a in ablations):
        raise ValueError(f"an ablation removes a head below layer {start}, whose input is given")
    if any(a.mode == "mean" for a in ablations) and head_means is None:
        raise ValueError("mean ablation needs head_means (head_output_means over the analysis images)")
    rows = {}  # mode -> (A*B, L, H) bool: the heads removed in each row of the stacked batch
    for mode in {a.mode for a in ablations}:
        masks = torch.stack([a.heads & (a.mode == mode) for a in ablations])  # (A, L, H)
        rows[mode] = masks.repeat_interleave(len(hidden), dim=0).to(hidden.device)

    def uniform(layer: int, _module: nn.Module, _args: tuple[Tensor, ...], q: Tensor) -> Tensor:
        return q.masked_fill(rows["uniform"][:, layer, :, None, None], 0.0)  # q (A*B, H, T, head_dim)

    def mean(layer: int, _module: nn.Module, args: tuple[Tensor, ...]) -> tuple[Tensor]:
        means = head_means[layer].to(args[0])  # type: ignore[index]  # (T, H, head_dim)
        heads = args[0].unflatten(-1, means.shape[-2:])  # (A*B, T, H, head_dim): the input of proj, head by head
        return (torch.where(rows["mean"][:, layer, None, :, None], means, heads).flatten(-2),)

    with ExitStack() as hooks:
        for layer in range(start, len(model.blocks)):
            attn = model.blocks[layer].attn
            if "uniform" in rows:
                hooks.enter_context(attn.q_norm.register_forward_hook(partial(uniform, layer)))
            if "mean" in rows:
                hooks.enter_context(attn.proj.register_forward_pre_hook(partial(mean, layer)))
        x = hidden.repeat(len(ablations), 1, 1)  # (A*B, T, D), ablation-major
        for block in model.blocks[start:]:
            x = block(x)
        return model.forward_head(model.norm(x)).unflatten(0, (len(ablations), len(hidden)))


def block_inputs(model: nn.Module, images: Tensor) -> tuple[Tensor, list[Tensor]]:
    """Clean logits ``(B, C)`` and the input of every block ``[(B, T, D)] * L``."""
    inputs: list[Tensor] = []
    with ExitStack() as hooks:
        for block in model.blocks:
            hooks.enter_context(block.register_forward_pre_hook(lambda _m, args: inputs.append(args[0])))
        logits = model(images)
    return logits, inputs


@dataclass(frozen=True)
class Outcomes:
    """Per image: correct or not, and the cross-entropy, clean and under each ablation (CPU)."""

    clean_correct: Tensor  # (N,) bool
    clean_loss: Tensor  # (N,) float32
    correct: Tensor  # (A, N) bool
    loss: Tensor  # (A, N) float32


def ablate(
    model: nn.Module,
    images: Tensor,
    labels: Tensor,
    ablations: Sequence[Ablation],
    batch_size: int = 250,
    stack: int = 6,
) -> Outcomes:
    """Run ``ablations`` on ``images`` ``(N, 3, H, W)`` (normalised) with ``labels`` ``(N,)``: per batch of
    ``batch_size`` one clean forward keeps every block's input, then the ablations that share their first removed
    layer run from there, ``stack`` at a time in one batch. Eval mode (restored), no gradients, on the model's
    device; results on the CPU."""
    attns = [getattr(block, "attn", None) for block in getattr(model, "blocks", ())]
    if not attns or not all(isinstance(a, Attention) and isinstance(a.norm, nn.Identity) for a in attns):
        raise ValueError("head ablation needs a timm VisionTransformer whose heads reach proj unmixed (no scale_norm)")
    if images.ndim != 4 or len(images) == 0 or labels.shape != (len(images),):
        shapes = f"{tuple(images.shape)} and {tuple(labels.shape)}"
        raise ValueError(f"expected images (N, 3, H, W) with N > 0 and labels (N,), got {shapes}")
    device = next(model.parameters()).device
    labels = labels.to(device)
    correct = torch.zeros(len(ablations), len(images), dtype=torch.bool, device=device)  # (A, N)
    loss = torch.zeros(len(ablations), len(images), device=device)  # (A, N)
    by_start: dict[int, list[int]] = {}
    for index, ablation in enumerate(ablations):
        by_start.setdefault(ablation.start, []).append(index)
    chunks = [(start, ids[i : i + stack]) for start, ids in sorted(by_start.items()) for i in range(0, len(ids), stack)]
    clean_correct, clean_loss = [], []
    with evaluating(model):
        means = head_output_means(model, images, batch_size) if any(a.mode == "mean" for a in ablations) else None
        for offset, batch in zip(range(0, len(images), batch_size), _batches(model, images, batch_size)):
            span, y = slice(offset, offset + len(batch)), labels[offset : offset + len(batch)]  # y (B,)
            logits, inputs = block_inputs(model, batch)  # (B, C), [(B, T, D)] * L
            clean_correct.append(logits.argmax(dim=-1) == y)
            clean_loss.append(F.cross_entropy(logits.float(), y, reduction="none"))
            for start, chunk in chunks:
                out = ablated_logits(model, inputs[start], start, [ablations[i] for i in chunk], means).float()
                correct[chunk, span] = out.argmax(dim=-1) == y  # out (K, B, C)
                loss[chunk, span] = F.cross_entropy(out.transpose(1, 2), y.expand(len(chunk), -1), reduction="none")
    return Outcomes(torch.cat(clean_correct).cpu(), torch.cat(clean_loss).cpu(), correct.cpu(), loss.cpu())


def _mask(shape: tuple[int, int], flat_indices: Tensor) -> Tensor:
    return torch.zeros(shape[0] * shape[1], dtype=torch.bool).index_fill_(0, flat_indices, True).view(shape)  # (L, H)


def ablation_plan(distance: Tensor, ks: Sequence[int] = KS, draws: int = 5, seed: int = 0) -> tuple[Ablation, ...]:
    """Every ablation, per mode: each head; per layer its more local half of heads and its less local half
    (``H // 2`` each, by ``distance`` ``(L, H)``); across the model the ``k`` most local heads, ``draws`` seeded random
    sets of ``k`` (the same in every mode) and the ``k`` least local. A ``k`` above the number of heads is left out."""
    num_layers, num_heads = shape = tuple(distance.shape)
    flat = distance.detach().cpu().flatten()
    by_locality = flat.argsort(stable=True)  # (L*H,) most local first
    generator = torch.Generator().manual_seed(seed)
    random_sets = {(k, d): torch.randperm(flat.numel(), generator=generator)[:k] for k in ks for d in range(draws)}
    plan: list[Ablation] = []
    for mode in MODES:
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
    """Spearman's rho between the heads' ``distance`` ``(n,)`` and the accuracy their ablation costs (from
    ``clean_correct`` ``(N,)`` and ``correct`` ``(n, N)``), with a seeded percentile bootstrap interval over images:
    ``(rho, low, high)``. A resample that leaves every head's drop tied has no rho: it counts as -1 for the low end
    and +1 for the high end, so that the interval holds whatever it would have been (few images, or heads whose
    removal changes nothing, widen it up to [-1, 1]). All NaN where rho itself is undefined."""
    clean, ablated = clean_correct.double(), correct.double()  # (N,), (n, N)
    num_images = clean.numel()
    rho = float(spearman(distance, clean.mean() - ablated.mean(dim=1)))
    if math.isnan(rho):
        return rho, math.nan, math.nan
    generator = torch.Generator().manual_seed(seed)
    drawn = torch.randint(num_images, (resamples, num_images), generator=generator)  # (R, N) image indices
    counts = torch.zeros(resamples, num_images, dtype=torch.float64)  # (R, N) how often each image was drawn
    counts.scatter_add_(1, drawn, torch.ones(drawn.shape, dtype=torch.float64))
    drops = (counts @ clean)[:, None] / num_images - counts @ ablated.T / num_images  # (R, n) exact counts / N
    rhos = spearman(distance.double().expand(resamples, -1), drops)  # (R,)
    tail = (1 - level) / 2
    low, high = torch.quantile(rhos.nan_to_num(-1.0), tail), torch.quantile(rhos.nan_to_num(1.0), 1 - tail)
    return rho, float(low), float(high)


def head_ablation(
    model: nn.Module,
    images: Tensor,
    labels: Tensor,
    distance: Tensor,
    ks: Sequence[int] = KS,
    draws: int = 5,
    seed: int = 0,
    batch_size: int = 250,
    resamples: int = 1000,
) -> tuple[list[dict], dict[str, float]]:
    """Every ablation of ``ablation_plan`` on ``images`` ``(N, 3, H, W)`` (normalised) with ``labels`` ``(N,)``, heads
    ranked by ``distance`` ``(L, H)``: ablation.csv's rows (a single head's with its distance) and the probe's
    scalars: the clean accuracy; per mode the drop (pts) without the k most and least local heads, the random draws'
    mean and sample std (NaN for one draw), and ``bootstrap_spearman`` over the single heads (seeded by ``seed``)."""
    plan = ablation_plan(distance, ks, draws, seed)
    outcomes = ablate(model, images, labels, plan, batch_size)
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
        chosen = [i for i, a in enumerate(plan) if (a.group, a.mode, a.size) == (group, mode, k)]
        return 100 * (clean - accuracy[chosen])

    scalars = {"ablation_clean_accuracy": clean}
    for mode in MODES:
        for k in sorted({a.size for a in plan if a.group == "most_local" and a.mode == mode}):
            scalars[f"ablation_{mode}_most_local_{k}_drop_pts"] = float(drops("most_local", mode, k)[0])
            random, key = drops("random", mode, k), f"ablation_{mode}_random_{k}_drop_pts"
            if len(random):
                scalars[f"{key}_mean"] = float(random.mean())
                scalars[f"{key}_std"] = float(random.std()) if len(random) > 1 else float("nan")
            scalars[f"ablation_{mode}_least_local_{k}_drop_pts"] = float(drops("least_local", mode, k)[0])
        single = [i for i, a in enumerate(plan) if a.group == "head" and a.mode == mode]
        rho = bootstrap_spearman(distance.flatten(), outcomes.clean_correct, outcomes.correct[single], resamples, seed)
        scalars |= dict(zip(spearman_keys(mode), rho))
    return rows, scalars


@rc_context(PLAIN_TEXT)
def plot_ablation(rows: list[dict], scalars: dict[str, float], mode: Mode, num_images: int, title: str = "") -> Figure:
    """Accuracy lost (pts) by removing each head against its mean attention distance, coloured by layer."""
    single = [row for row in rows if row["group"] == "head" and row["mode"] == mode]
    num_layers = 1 + max(row["layer"] for row in single)
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    for layer in range(num_layers):
        mine = [row for row in single if row["layer"] == layer]
        x, y = [row["distance_px"] for row in mine], [row["accuracy_drop_pts"] for row in mine]
        ax.scatter(x, y, s=22, color=colormaps["viridis"](layer / max(num_layers - 1, 1)), label=f"layer {layer}")
    ax.axhline(0.0, color="gray", lw=0.8)
    rho = rho_text(*(scalars[key] for key in spearman_keys(mode)))
    heading = f"{mode} ablation: Spearman ρ [95% CI] {rho}, {num_images} images"
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


def _means(values, *keys: str) -> list[float] | None:
    """The mean over seeds of each of ``keys``; None where one has no values."""
    found = [values(key) for key in keys]
    return [sum(v) / len(v) for v in found] if all(found) else None


def _sentence(values) -> str:
    """report.md's cell: "without its 6 most local heads: −x pts; without 6 random heads: −y pts (sd z over draws)",
    the means over seeds under mean ablation; sd, not the ± of a confidence interval the other cells use."""
    means = _means(values, f"ablation_mean_most_local_{K}_drop_pts", f"ablation_mean_random_{K}_drop_pts_mean")
    if means is None:
        return "—"
    spread = _means(values, f"ablation_mean_random_{K}_drop_pts_std")
    z = f" (sd {spread[0]:.1f} over draws)" if spread else ""
    return f"without its {K} most local heads: {_pts(means[0])} pts; without {K} random heads: {_pts(means[1])} pts{z}"


def rho_text(rho: float, low: float, high: float) -> str:
    """Spearman's rho and its 95% interval (bootstrap_spearman), or why there is none."""
    return "undefined (every head's drop tied)" if math.isnan(rho) else f"{rho:+.2f} [{low:+.2f}, {high:+.2f}]"


def _rho(values) -> str:
    means = _means(values, *spearman_keys("mean"))  # a seed's interval is there where its rho is
    return rho_text(*means) if means else "—"


def columns() -> tuple[Column, ...]:
    """report.md: the mean-ablation sentence and Spearman's rho with its interval; ladder.csv: every number."""
    keys = ["ablation_clean_accuracy"]
    for mode in MODES:
        for k in KS:
            keys += [f"ablation_{mode}_{g}_{k}_drop_pts" for g in ("most_local", "least_local")]
            keys += [f"ablation_{mode}_random_{k}_drop_pts_{s}" for s in ("mean", "std")]
        keys += spearman_keys(mode)
    shown = [
        Column(f"ablation_mean_most_local_{K}_drop_pts", "head ablation (mean)", text=_sentence),
        Column("ablation_mean_spearman", "ρ(distance, accuracy lost), 95% CI", text=_rho),
    ]
    return (*shown, *(Column(key, digits=3) for key in keys if key not in {c.key for c in shown}))
