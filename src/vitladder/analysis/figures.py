"""Figures of attention summaries (matplotlib's object API with the Agg canvas; no pyplot state).

``save_figure`` writes one atomically: to a temporary name, then renamed onto its path. Titles and labels are plain
text (``PLAIN_TEXT`` while a figure is made and saved): they may hold names from the data (a class folder called
``price_$``), which matplotlib would otherwise parse as maths, and raise on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from matplotlib import colormaps, rc_context
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator
from torch import Tensor

from vitladder.analysis.metrics import declared, patch_distances
from vitladder.analysis.summary import ExampleAttention
from vitladder.atomic import atomic_path

PLAIN_TEXT = {"text.parse_math": False, "text.usetex": False}
EXPLAINER_GRID, EXPLAINER_PATCH, EXPLAINER_PATCH_PX = 8, (2, 3), 4  # the query patch: (row, column)
Series = Mapping[str, tuple[Sequence[float], Sequence[float]]]  # name (e.g. a rung) -> its points (x, y)


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Render ``fig`` to a PNG at ``path`` atomically, the texts drawn then (tick labels) plain too."""
    FigureCanvasAgg(fig)
    with rc_context(PLAIN_TEXT), atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120, bbox_inches="tight")
    return Path(path)


@rc_context(PLAIN_TEXT)
def plot_heads(values: np.ndarray, uniform: float | None, ylabel: str, title: str) -> Figure:
    """Per-head dots, the per-layer mean as a line and the uniform value (if any) dashed; ``values`` is (L, H)."""
    values = np.asarray(values, dtype=float)  # (L, H)
    layers = np.arange(values.shape[0])
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    ax.scatter(layers.repeat(values.shape[1]), values.ravel(), s=18, color="tab:blue", alpha=0.55, label="head")
    mean_label = "layer mean (6 heads)" if values.shape[1] == 6 else "layer mean"
    ax.plot(layers, values.mean(axis=1), "o-", color="black", label=mean_label)
    if uniform is not None:
        ax.axhline(uniform, ls="--", color="tab:red", label=f"uniform attention ({uniform:.2f})")
    top = max(values.max(), uniform if uniform is not None else values.max())
    ax.set(xlabel="layer", ylabel=ylabel, title=title, xticks=layers, ylim=(0, 1.1 * top))
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3)
    return fig


def _show_map(ax, values: np.ndarray, grid: int) -> None:
    """One attention map on its grid, scaled to its own maximum."""
    grid_map = np.asarray(values, dtype=float).reshape(grid, grid)
    ax.imshow(grid_map, cmap="inferno", vmin=0.0, vmax=max(float(grid_map.max()), 1e-12))
    ax.set(xticks=[], yticks=[])


@rc_context(PLAIN_TEXT)
def plot_cls_attention(example: ExampleAttention, grid: int, title: str) -> Figure:
    """The CLS token's attention for every layer x head, the head mean and the rollout, beside the image."""
    cls_maps = example.cls_maps.float().numpy()  # (L, H, N)
    rollout = example.rollout_by_layer.float().numpy()  # (L, N)
    num_layers, num_heads, _ = cls_maps.shape
    cols = 2 + num_heads + 2  # image, a spacer for the row labels, heads, mean, rollout
    fig = Figure(figsize=(1.3 * (cols - 0.7), 1.3 * num_layers + 0.5))
    grid_spec = {"width_ratios": [1, 0.3] + [1] * (cols - 2), "wspace": 0.08, "hspace": 0.08}
    axes = fig.subplots(num_layers, cols, squeeze=False, gridspec_kw=grid_spec)
    fig.subplots_adjust(left=0.02, right=0.98, bottom=0.03, top=1 - 0.6 / (1.3 * num_layers + 0.5))
    for layer in range(num_layers):
        axes[layer, 0].axis("off")
        axes[layer, 1].axis("off")
        for ax, grid_map in zip(axes[layer, 2:], [*cls_maps[layer], cls_maps[layer].mean(axis=0), rollout[layer]]):
            _show_map(ax, grid_map, grid)
        axes[layer, 2].set_ylabel(f"layer {layer}")
    axes[0, 0].imshow(example.image.permute(1, 2, 0).numpy())
    names = ["image", "", *(f"head {h}" for h in range(num_heads)), "head mean", "rollout to here"]
    for ax, name in zip(axes[0], names):
        ax.set_title(name, fontsize=9)
    fig.suptitle(title)
    axes[-1, 0].text(
        0.0, 0.0, "each map\nscaled to its\nown maximum", fontsize=8, color="gray", transform=axes[-1, 0].transAxes
    )
    return fig


def explainer_rows(grid: int, row: int, col: int) -> dict[str, Tensor]:
    """Three made-up heads' attention of the patch at (row, col) over the ``N`` patches, ``(N,)`` each: spread equally
    over its neighbours (8, fewer on an edge), over the 3 patches farthest from it (ties: lower index first), and
    uniform."""
    index = torch.arange(grid * grid)
    dist2 = (index // grid - row) ** 2 + (index % grid - col) ** 2  # (N,) squared distance in patch widths
    local = ((dist2 > 0) & (dist2 <= 2)).float()
    far = torch.zeros(grid * grid)
    far[torch.sort(dist2, descending=True, stable=True).indices[:3]] = 1.0 / 3
    return {"local": local / local.sum(), "far": far, "uniform": torch.full((grid * grid,), 1.0 / (grid * grid))}


@rc_context(PLAIN_TEXT)
def plot_explainer() -> Figure:
    """Three made-up heads for one patch of the 8x8 grid: local, focused but far, uniform."""
    grid, (row, col) = EXPLAINER_GRID, EXPLAINER_PATCH
    distances = patch_distances(grid, EXPLAINER_PATCH_PX)[row * grid + col]  # (N,) from the query patch
    rows = explainer_rows(grid, row, col)
    fig = Figure(figsize=(9, 3.4))
    axes = fig.subplots(1, 3)
    for ax, (kind, name) in zip(axes, (("local", "local"), ("far", "focused but far"), ("uniform", "uniform"))):
        attention = rows[kind]  # (N,)
        entropy = float(-torch.special.xlogy(attention, attention).sum())
        _show_map(ax, attention.numpy(), grid)
        ax.set_xticks(np.arange(grid + 1) - 0.5, minor=True)
        ax.set_yticks(np.arange(grid + 1) - 0.5, minor=True)
        ax.grid(which="minor", color="gray", linewidth=0.6)
        ax.tick_params(which="minor", length=0)
        ax.add_patch(Rectangle((col - 0.5, row - 0.5), 1, 1, fill=False, edgecolor="tab:blue", linewidth=2.5))
        ax.set_title(f"{name}\n{float(attention @ distances):.1f} px, {entropy:.2f} nats", fontsize=10)
    fig.suptitle(
        f"Three made-up heads for the patch at row {row}, column {col} (outlined), over the "
        f"{grid * grid} patches only\n(each map scaled to its own maximum)",
        fontsize=10,
    )
    return fig


def plot_tracking(history: Sequence[Mapping[str, float]], uniform: Mapping[str, float], title: str) -> Figure:
    """Per-layer values over training, one panel per metric tracked (``declared("figures")``): ``history`` rows
    have epoch, layer and each metric's name; ``uniform`` (metric name -> value) adds a dashed line."""
    layers = sorted({int(r["layer"]) for r in history})

    def over_epochs(layer: int, key: str) -> tuple[list, list]:  # rows from before the metric was declared lack it
        rows = sorted((r["epoch"], r[key]) for r in history if int(r["layer"]) == layer and key in r)
        return [epoch for epoch, _ in rows], [value for _, value in rows]

    panels = []
    for m in declared("figures"):
        series = {f"layer {layer}": over_epochs(layer, m.name) for layer in layers}
        panels.append((m.axis_label, series, {"uniform": uniform[m.name]} if m.name in uniform else {}))
    return plot_epoch_lines(panels, title)


def _lines(ax, series: Series, references: Mapping[str, float]) -> None:
    """One line per named series of (x, y) points (e.g. one per rung), reference values dashed; the y-axis from 0
    (below it for negative values) to a tenth above the highest value."""
    cmap = colormaps["plasma"]
    for i, (name, (x, y)) in enumerate(series.items()):
        ax.plot(x, y, "o-", ms=4, color=cmap(0.9 * i / max(len(series) - 1, 1)), label=name)
    for style, (name, value) in zip(("--", ":", "-."), references.items()):
        ax.axhline(value, ls=style, lw=1.2, color="gray", label=name)
    values = [v for _, y in series.values() for v in y] + list(references.values())
    if values:  # an empty panel (nothing tracked) keeps matplotlib's axes, without a legend
        ax.set_ylim(1.1 * min([*values, 0.0]), 1.1 * max([*values, 1e-9]))
        ax.legend(fontsize=7, loc="best")
    ax.grid(alpha=0.3)


@rc_context(PLAIN_TEXT)
def plot_layer_lines(
    series: Mapping[str, Sequence[float]], references: Mapping[str, float], ylabel: str, title: str
) -> Figure:
    """One line per named series over the layers (e.g. one per rung), reference values dashed."""
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    _lines(ax, {name: (np.arange(len(values)), values) for name, values in series.items()}, references)
    num_layers = max((len(v) for v in series.values()), default=0)
    ax.set(xlabel="layer", ylabel=ylabel, title=title, xticks=np.arange(num_layers))
    return fig


@rc_context(PLAIN_TEXT)
def plot_epoch_lines(panels: Sequence[tuple[str, Series, Mapping[str, float]]], title: str) -> Figure:
    """One panel per (label, series, references): each series' values against epochs trained, one line per name
    (e.g. one per rung), reference values dashed."""
    fig = Figure(figsize=(5 * len(panels), 4))
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (label, series, references) in zip(axes, panels):
        _lines(ax, series, references)
        ax.set_xlabel("epochs trained (0: initialisation)")
        ax.set_title(label, fontsize=10)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.suptitle(title)
    return fig
