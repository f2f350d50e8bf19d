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
from vitladder.analysis.summary import AttentionSummary
from vitladder.atomic import write_text
from vitladder.text import printable

__all__ = [
    "HEADS_COLUMNS",
    "LAYERS_COLUMNS",
    "TRACKING_COLUMNS",
    "analysis_summary_for_done",
    "head_rows",
    "layer_rows",
    "read_analysis_csv",
    "read_csv",
    "tracking_row",
    "write_analysis",
    "write_csv",
]

HEADS_CSV, LAYERS_CSV, TRACKING_CSV = "heads.csv", "layers.csv", "tracking.csv"
# One name per quantity, the same in every CSV, W&B key and table: distance_px, entropy_nats, cls_share,
# distance_drop_px (the names of AttentionSummary's METRICS).
HEADS_COLUMNS = ("layer", "head", "distance_px", "entropy_nats", "cls_share", "distance_drop_px")
LAYERS_COLUMNS = ("layer", "distance_px", "entropy_nats", "cls_share", "uniform_distance_px",
                  "uniform_entropy_nats", "distance_drop_px")
TRACKING_COLUMNS = ("epoch", "layer", "distance_px", "entropy_nats")  # epoch: epochs trained, 0 = initialisation
# Column names of analysis folders written before the names were unified, read under today's names.
LEGACY_COLUMNS = {"mean_distance_px": "distance_px", "mean_distance_drop_px": "distance_drop_px",
                  "distance": "distance_px", "entropy": "entropy_nats"}
CLASS_NAME_CHARS = 40  # a longer class name is cut short in figure titles


def _num(value: float) -> float:
    return round(float(value), 6)


def head_rows(summary: AttentionSummary) -> list[dict]:
    """One row per head, layer-major: ``L * H`` rows in HEADS_COLUMNS."""
    heads = summary.heads
    return [
        {"layer": l, "head": h, "distance_px": _num(heads.distance_px[l, h]),
         "entropy_nats": _num(heads.entropy_nats[l, h]), "cls_share": _num(heads.cls_share[l, h]),
         "distance_drop_px": _num(heads.distance_drop_px[l, h])}
        for l in range(summary.num_layers)
        for h in range(summary.num_heads)
    ]


def layer_rows(summary: AttentionSummary) -> list[dict]:
    """One row per layer (mean of its heads) in LAYERS_COLUMNS."""
    layers = summary.layers
    return [
        {"layer": l, "distance_px": _num(layers.distance_px[l]), "entropy_nats": _num(layers.entropy_nats[l]),
         "cls_share": _num(layers.cls_share[l]), "uniform_distance_px": _num(summary.uniform_distance_px),
         "uniform_entropy_nats": _num(summary.uniform_entropy_nats),
         "distance_drop_px": _num(layers.distance_drop_px[l])}
        for l in range(summary.num_layers)
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
    """A tracking history row (epoch, layer, distance_px, entropy_nats), older key names accepted."""
    row = {LEGACY_COLUMNS.get(k, k): v for k, v in row.items()}
    return {"epoch": int(row["epoch"]), "layer": int(row["layer"]), "distance_px": float(row["distance_px"]),
            "entropy_nats": float(row["entropy_nats"])}


def read_tracking(out_dir: str | Path) -> list[dict]:
    """The tracking history of an analysis folder, or [] when it has none."""
    path = Path(out_dir) / TRACKING_CSV
    return [tracking_row(r) for r in read_csv(path)] if path.exists() else []


def analysis_summary_for_done(summary: AttentionSummary) -> dict:
    """Headline numbers for done.json (named like the columns of the ladder's ladder.csv)."""
    layers = summary.layers
    layer = 1 if summary.num_layers > 1 else 0
    return {
        "layer1_distance_px": _num(layers.distance_px[layer]),
        "uniform_distance_px": _num(summary.uniform_distance_px),
        "layer1_entropy_nats": _num(layers.entropy_nats[layer]),
        "uniform_entropy_nats": _num(summary.uniform_entropy_nats),
        "analysis_images": summary.num_images,
    }


def write_analysis(
    summary: AttentionSummary,
    out_dir: str | Path,
    rung: str,
    classes: Sequence[str] | None = None,
    history: Sequence[Mapping] | None = None,
) -> dict[str, Path]:
    """Write the CSVs and figures of one run into ``out_dir``; returns {name: path}.

    ``history`` (tracking rows: epoch, layer, distance_px, entropy_nats) adds tracking.csv and locality.png.
    """
    out = Path(out_dir)
    where = f"{summary.num_images} test images"
    written = {
        "heads": write_csv(out / HEADS_CSV, HEADS_COLUMNS, head_rows(summary)),
        "layers": write_csv(out / LAYERS_CSV, LAYERS_COLUMNS, layer_rows(summary)),
        "distance": figures.plot_heads(summary.heads.distance_px.numpy(), summary.uniform_distance_px,
                                       "mean attention distance (px)", f"{rung}: distance per head ({where})",
                                       out / "distance.png"),
        "entropy": figures.plot_heads(summary.heads.entropy_nats.numpy(), summary.uniform_entropy_nats,
                                      "entropy (nats)", f"{rung}: entropy per head ({where})", out / "entropy.png"),
        "explainer": figures.plot_explainer(out / "explainer.png"),
    }
    example = summary.example
    if example is not None:
        def name(index: int | None) -> str:  # a class-folder name: one short line of text in the title
            if index is None:
                return "?"
            return printable(classes[index], limit=CLASS_NAME_CHARS) if classes and index < len(classes) else str(index)

        title = f"{rung}: CLS attention, test image {example.index} (true {name(example.label)}, " \
                f"predicted {name(example.predicted)})"
        written["cls_attention"] = figures.plot_cls_attention(example, summary.grid, title, out / "cls_attention.png")
    if history:
        rows = [tracking_row(r) for r in history]
        rounded = [{**r, "distance_px": _num(r["distance_px"]), "entropy_nats": _num(r["entropy_nats"])} for r in rows]
        written["tracking"] = write_csv(out / TRACKING_CSV, TRACKING_COLUMNS, rounded)
        written["locality"] = figures.plot_tracking(rows, summary.uniform_distance_px, summary.uniform_entropy_nats,
                                                    f"{rung}: locality forming during training", out / "locality.png")
    return written
