"""What every head looks at: the per-head metrics declared in ``metrics.METRICS``, per head and per layer, and their
forming during training (docs/design.md §4). Each metric reaches as far as its ``shown`` level says: heads.csv and
layers.csv; the W&B tables and a by-layer chart; layer 1 and its uniform value in done.json and the ladder report;
for those shown in figures, a per-head figure ``<short>.png`` and tracking (``layer<l>/<name>``: tracking.csv,
locality.png).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields

from torch import Tensor, nn

from vitladder.analysis import figures
from vitladder.analysis.metrics import HeadMetric, declared
from vitladder.analysis.probes import ByLayer, Chart, Column, Context, Result
from vitladder.analysis.summary import AttentionSummary, analyse
from vitladder.config_schema import ReferenceFigures

HEADLINE_LAYER = 1  # "layer 1": the second block, where the article reads locality (docs/design.md §4)


def headline_layer(num_layers: int) -> int:
    """The index of the layer reported as "layer 1"; a one-layer model reports its only layer."""
    return min(HEADLINE_LAYER, num_layers - 1)


def track(model: nn.Module, images: Tensor, ctx: Context) -> dict[str, float]:
    """Per layer, each metric shown in figures: ``layer<l>/<name>``."""
    summary = analyse(model, images, ctx.batch_size, ctx.patch_px, stats=ctx.stats)
    layers, shown = summary.layers, declared("figures")
    return {f"layer{i}/{m.name}": float(layers[m.name][i]) for i in range(summary.num_layers) for m in shown}


def head_rows(summary: AttentionSummary) -> list[dict]:
    """heads.csv: one row per head, layer-major, every declared metric."""
    return [
        {"layer": layer, "head": h, **{name: float(values[layer, h]) for name, values in summary.heads.items()}}
        for layer in range(summary.num_layers)
        for h in range(summary.num_heads)
    ]


def layer_rows(summary: AttentionSummary) -> list[dict]:
    """layers.csv: per layer the metrics shown beyond the CSVs, the uniform values, then the CSV-only variants
    (the order files of earlier versions have)."""
    shown, csv_only = declared("wandb"), [m for m in declared() if m.shown == "csv"]
    uniform = {f"uniform_{name}": float(value) for name, value in summary.uniform.items()}
    layers = summary.layers
    return [
        {
            "layer": layer,
            **{m.name: float(layers[m.name][layer]) for m in shown},
            **uniform,
            **{m.name: float(layers[m.name][layer]) for m in csv_only},
        }
        for layer in range(summary.num_layers)
    ]


def tracking_rows(history: tuple[Mapping[str, float], ...], num_layers: int) -> list[dict]:
    """tracking.csv: per tracked epoch and layer, each metric tracked (one declared after the row was tracked is left
    out: an empty cell)."""
    rows = []
    for row, layer in ((row, layer) for row in history for layer in range(num_layers)):
        values = {m.name: row[key] for m in declared("figures") if (key := f"layer{layer}/{m.name}") in row}
        rows += [{"epoch": int(row["epoch"]), "layer": layer, **values}] if values else []
    return rows


def run(model: nn.Module, images: Tensor, labels: Tensor, ctx: Context) -> Result:
    summary = analyse(model, images, ctx.batch_size, ctx.patch_px, stats=ctx.stats)
    result = Result(tables={"heads": head_rows(summary), "layers": layer_rows(summary)})
    for metric in declared("figures"):  # <short>.png: every head of every layer
        title = f"{ctx.rung}: {metric.short} per head ({len(images)} test images)"
        values, uniform = summary.heads[metric.name].numpy(), summary.uniform.get(metric.name)
        result.figures[metric.short] = figures.plot_heads(values, uniform, metric.axis_label, title)
    result.figures["explainer"] = figures.plot_explainer()
    tracked = tracking_rows(ctx.history, summary.num_layers)
    if tracked:
        result.tables["tracking"] = tracked
        title = f"{ctx.rung}: locality forming during training"
        result.figures["locality"] = figures.plot_tracking(tracked, summary.uniform, title)
    for metric in declared("wandb"):
        title = f"{ctx.rung}: {metric.axis_label} by layer"
        result.charts[f"{metric.name}_by_layer"] = Chart("layers", "layer", metric.name, title)
    result.scalars = headline(summary)
    return result


def headline(summary: AttentionSummary) -> dict[str, float]:
    """done.json's numbers: layer 1 of each metric shown in the report, and its uniform value."""
    layer, scalars = headline_layer(summary.num_layers), {}
    for metric in declared("report"):
        scalars[f"layer1_{metric.name}"] = float(summary.layers[metric.name][layer])
        if metric.name in summary.uniform:
            scalars[f"uniform_{metric.name}"] = float(summary.uniform[metric.name])
    return scalars


def _reference(metric: HeadMetric):
    """The article's layer-1 figure with its uniform value in brackets, where it gives one (ReferenceFigures)."""
    layer1, uniform = f"layer1_{metric.name}", f"uniform_{metric.name}"
    if layer1 not in {figure.name for figure in fields(ReferenceFigures)}:
        return None
    return lambda ref: f"{ref[layer1]} ({ref[uniform]})" if layer1 in ref else "—"


def columns() -> tuple[Column, ...]:
    """Layer 1 of each metric shown in the report, the article's figure beside it (and a chart by rung), and its
    uniform value; the metrics shown in figures tracked (read when called: a test may declare a metric)."""
    columns = []
    for m in declared("report"):
        reference, uniform = _reference(m), f"uniform_{m.name}" if m.uniform else None
        unit = f" ({m.unit})" if m.unit else ""
        columns.append(
            Column(
                f"layer1_{m.name}",
                f"layer-1 {m.label}{unit}",
                m.digits,
                reference=reference,
                track=f"layer1/{m.name}" if m.shown == "figures" else None,
                by_rung=f"layer1_{m.short}" if reference else None,
                uniform=uniform,
            )
        )
        columns += [Column(uniform, f"uniform{unit}", m.digits, ci=False)] if uniform else []
    return tuple(columns)


def by_layer() -> tuple[ByLayer, ...]:
    """layers.csv's metrics shown beyond the CSVs; those shown in figures drawn (read when called, as columns)."""
    return tuple(
        ByLayer(
            m.name,
            m.label,
            m.short,
            m.unit,
            uniform=f"uniform_{m.name}" if m.uniform else None,
            figure=m.shown == "figures",
        )
        for m in declared("wandb")
    )
