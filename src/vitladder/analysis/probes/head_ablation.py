"""Do the local heads matter? Each head removed (mean and uniform ablation), each layer's more local half against
its less local half, and the k most local heads against k random ones and the k least local (``analysis/ablation.py``,
the mechanism ``head_removal.py``): ``ablation.csv``, accuracy lost against each head's distance, Spearman's rho.

``analysis.settings.head_ablation`` may set ``images`` (the first N analysis images; default all), ``draws``
(random sets per k, 5) and ``resamples`` (bootstrap resamples, 1000): the smoke profile takes fewer.
"""

from __future__ import annotations

from torch import Tensor, nn

from vitladder.analysis.ablation import KS, head_ablation, plot_ablation
from vitladder.analysis.head_removal import MODES
from vitladder.analysis.probes import Chart, Column, Context, Result
from vitladder.analysis.summary import analyse, model_inputs

DEFAULTS = {"images": None, "draws": 5, "resamples": 1000}  # conf/config.yaml sets them; a bare Context has these
K = max(KS)  # the report's sentence: the 6 most local heads against 6 random ones


def run(model: nn.Module, images: Tensor, labels: Tensor, ctx: Context) -> Result:
    settings = {**DEFAULTS, **ctx.settings.get("head_ablation", {})}
    images, labels = images[: settings["images"]], labels[: settings["images"]]
    # Heads ranked by their mean attention distance over the same images.
    distance = analyse(model, images, ctx.batch_size, ctx.patch_px, stats=ctx.stats).heads
    distance = distance["distance_px"]  # (L, H)
    result = head_ablation(
        model,
        model_inputs(model, images, ctx.stats),
        labels,
        distance,
        draws=int(settings["draws"]),
        seed=ctx.seed,
        batch_size=ctx.batch_size,
        resamples=int(settings["resamples"]),
    )
    rows = result.rows()
    for row in rows:  # the single-head rows: the head's distance, for the chart of cost against distance
        row["distance_px"] = float(distance[row["layer"], row["head"]]) if row["group"] == "head" else None
    scalars = {f"ablation_{name.replace('/', '_')}": value for name, value in result.scalars().items()}
    title = f"{ctx.rung}: accuracy lost without each head"
    return Result(
        tables={"ablation": rows},
        figures={f"ablation_{mode}": plot_ablation(result, mode, title) for mode in MODES},
        scalars=scalars,
        charts={"ablation_by_distance": Chart("ablation", "distance_px", "accuracy_drop_pts", title, "scatter")},
    )


def _pts(value: float) -> str:
    return f"{round(-value, 1) + 0.0:+.1f}".replace("-", "−")  # a drop of 3.2 pts reads −3.2; none, +0.0


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _sentence(mode: str):
    """report.md's cell: "without its 6 most local heads: −x pts; without 6 random heads: −y ± z pts", the means
    over seeds (± the spread over random draws)."""

    def text(values) -> str:
        local, random = (
            values(f"ablation_{mode}_most_local_{K}_drop_pts"),
            values(f"ablation_{mode}_random_{K}_drop_pts_mean"),
        )
        spread = values(f"ablation_{mode}_random_{K}_drop_pts_std")
        if not local or not random:
            return "—"
        z = f" ± {_mean(spread):.1f}" if spread else ""
        local, random = _pts(_mean(local)), _pts(_mean(random))
        return f"without its {K} most local heads: {local} pts; without {K} random heads: {random}{z} pts"

    return text


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
        Column(f"ablation_mean_most_local_{K}_drop_pts", "head ablation (mean)", text=_sentence("mean")),
        Column("ablation_mean_spearman", "ρ(distance, accuracy lost), 95% CI", text=_rho),
    ]
    return (*shown, *(Column(key, digits=3) for key in keys if key not in {c.key for c in shown}))
