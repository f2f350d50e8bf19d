"""A run's analysis folder: per-head and per-layer CSVs, the tracking history, and the PNG figures.

Written by the training callback after fitting and by ``scripts/analyze.py`` for any checkpoint;
read back by the ladder report. Every file is written atomically.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from vitladder.analysis import figures
from vitladder.analysis.metrics import declared
from vitladder.analysis.summary import AttentionSummary, headline_layer
from vitladder.atomic import write_text
from vitladder.text import printable

__all__ = [
    "LEGACY_COLUMNS",
    "analysis_summary_for_done",
    "head_rows",
    "heads_columns",
    "layer_rows",
    "layers_columns",
    "read_analysis_csv",
    "read_csv",
    "tracking_columns",
    "tracking_row",
    "write_analysis",
    "write_csv",
]

HEADS_CSV, LAYERS_CSV, TRACKING_CSV = "heads.csv", "layers.csv", "tracking.csv"

# One name per quantity, the same in every CSV, W&B key and table: each metric's name in metrics.METRICS
# (distance_px, entropy_nats, cls_share, distance_drop_px), and uniform_<name> for its uniform value.


def heads_columns() -> tuple[str, ...]:
    """heads.csv: layer, head, then every declared metric."""
    return ("layer", "head", *(m.name for m in declared()))


def layers_columns() -> tuple[str, ...]:
    """layers.csv: layer, the metrics shown beyond the CSVs, the uniform values, then the CSV-only variants
    (the order files of earlier versions have)."""
    shown, csv_only = declared("wandb"), [m for m in declared() if m.shown == "csv"]
    return (
        "layer",
        *(m.name for m in shown),
        *(f"uniform_{m.name}" for m in declared() if m.uniform),
        *(m.name for m in csv_only),
    )


def tracking_columns() -> tuple[str, ...]:
    """tracking.csv: epoch (epochs trained, 0 = initialisation), layer, then every metric tracked in training."""
    return ("epoch", "layer", *(m.name for m in declared("figures")))


# Column names of analysis folders written before the names were unified, read under today's names.
LEGACY_COLUMNS = {
    "mean_distance_px": "distance_px",
    "mean_distance_drop_px": "distance_drop_px",
    "distance": "distance_px",
    "entropy": "entropy_nats",
}
CLASS_NAME_CHARS = 40  # a longer class name is cut short in figure titles


def _num(value: float) -> float:
    return round(float(value), 6)


def head_rows(summary: AttentionSummary) -> list[dict]:
    """One row per head, layer-major: ``L * H`` rows in heads_columns()."""
    heads = summary.heads
    return [
        {"layer": layer, "head": h, **{name: _num(values[layer, h]) for name, values in heads.items()}}
        for layer in range(summary.num_layers)
        for h in range(summary.num_heads)
    ]


def layer_rows(summary: AttentionSummary) -> list[dict]:
    """One row per layer (mean of its heads) in layers_columns()."""
    layers = summary.layers
    uniform = {f"uniform_{name}": _num(value) for name, value in summary.uniform.items()}
    return [
        {
            key: layer if key == "layer" else uniform[key] if key in uniform else _num(layers[key][layer])
            for key in layers_columns()
        }
        for layer in range(summary.num_layers)
    ]


def write_csv(path: str | Path, columns: Sequence[str], rows: Iterable[Mapping]) -> Path:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_text(path, buffer.getvalue())
    return Path(path)


def read_csv(path: str | Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def read_analysis_csv(path: str | Path) -> list[dict[str, str]]:
    """Rows of heads.csv, layers.csv or tracking.csv, older column names read under today's."""
    return [{LEGACY_COLUMNS.get(k, k): v for k, v in row.items()} for row in read_csv(path)]


def tracking_row(row: Mapping) -> dict:
    """A tracking history row in tracking_columns(), older key names accepted. A metric the row lacks (declared
    after it was written: an empty cell in tracking.csv) is left out."""
    row = {LEGACY_COLUMNS.get(k, k): v for k, v in row.items()}
    return {
        "epoch": int(row["epoch"]),
        "layer": int(row["layer"]),
        **{m.name: float(row[m.name]) for m in declared("figures") if row.get(m.name) not in (None, "")},
    }


def read_tracking(out_dir: str | Path) -> list[dict]:
    """The tracking history of an analysis folder, or [] when it has none."""
    path = Path(out_dir) / TRACKING_CSV
    return [tracking_row(r) for r in read_csv(path)] if path.exists() else []


def analysis_summary_for_done(summary: AttentionSummary) -> dict:
    """Headline numbers for done.json (named like the columns of the ladder's ladder.csv): layer 1 of each
    metric shown in the ladder report, and its uniform value."""
    layers = summary.layers
    layer = headline_layer(summary.num_layers)
    headline: dict = {}
    for metric in declared("report"):
        headline[f"layer1_{metric.name}"] = _num(layers[metric.name][layer])
        if metric.name in summary.uniform:
            headline[f"uniform_{metric.name}"] = _num(summary.uniform[metric.name])
    return {**headline, "analysis_images": summary.num_images}


def write_analysis(
    summary: AttentionSummary,
    out_dir: str | Path,
    rung: str,
    classes: Sequence[str] | None = None,
    history: Sequence[Mapping] | None = None,
) -> dict[str, Path]:
    """Write the CSVs and figures of one run into ``out_dir``; returns {name: path}.

    ``history`` (tracking rows in tracking_columns()) adds tracking.csv and locality.png.
    """
    out = Path(out_dir)
    where = f"{summary.num_images} test images"
    written = {
        "heads": write_csv(out / HEADS_CSV, heads_columns(), head_rows(summary)),
        "layers": write_csv(out / LAYERS_CSV, layers_columns(), layer_rows(summary)),
    }
    for metric in declared("figures"):  # <short>.png: every head of every layer
        written[metric.short] = figures.plot_heads(
            summary.heads[metric.name].numpy(),
            summary.uniform.get(metric.name),
            metric.axis_label,
            f"{rung}: {metric.short} per head ({where})",
            out / f"{metric.short}.png",
        )
    written["explainer"] = figures.plot_explainer(out / "explainer.png")
    example = summary.example
    if example is not None:

        def name(index: int | None) -> str:  # a class-folder name: one short line of text in the title
            if index is None:
                return "?"
            return printable(classes[index], limit=CLASS_NAME_CHARS) if classes and index < len(classes) else str(index)

        title = (
            f"{rung}: CLS attention, test image {example.index} (true {name(example.label)}, "
            f"predicted {name(example.predicted)})"
        )
        written["cls_attention"] = figures.plot_cls_attention(example, summary.grid, title, out / "cls_attention.png")
    if history:
        rows = [tracking_row(r) for r in history]
        rounded = [{k: v if k in ("epoch", "layer") else _num(v) for k, v in r.items()} for r in rows]
        written["tracking"] = write_csv(out / TRACKING_CSV, tracking_columns(), rounded)
        written["locality"] = figures.plot_tracking(
            rows, summary.uniform, f"{rung}: locality forming during training", out / "locality.png"
        )
    return written
