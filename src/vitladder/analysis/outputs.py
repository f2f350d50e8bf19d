"""A run's analysis folder: each probe's tables as ``<name>.csv`` and figures as ``<name>.png``, written atomically
by the training callback after fitting and by ``scripts/analyze.py`` for any checkpoint; and the tracked history,
read back from a checkpoint or a run's metrics.csv."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from vitladder.analysis.figures import save_figure
from vitladder.analysis.probes import Result
from vitladder.atomic import write_text
from vitladder.run_folder import rounded, table_columns

# Column names of analysis folders written before the names were unified, read under today's names.
LEGACY_COLUMNS = {
    "mean_distance_px": "distance_px",
    "mean_distance_drop_px": "distance_drop_px",
    "distance": "distance_px",
    "entropy": "entropy_nats",
}


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
    """Rows of an analysis CSV, older column names read under today's."""
    return [{LEGACY_COLUMNS.get(k, k): v for k, v in row.items()} for row in read_csv(path)]


def write_results(results: Mapping[str, Result], out_dir: str | Path) -> dict[str, Path]:
    """Every probe's tables and figures into ``out_dir``: {name: path}."""
    out = Path(out_dir)
    written: dict[str, Path] = {}
    for result in results.values():
        for name, rows in result.tables.items():
            rows = [{k: rounded(v) for k, v in row.items()} for row in rows]
            written[name] = write_csv(out / f"{name}.csv", table_columns(rows), rows)
        for name, figure in result.figures.items():
            written[name] = save_figure(figure, out / f"{name}.png")
    return written


def done_scalars(results: Mapping[str, Result], num_images: int) -> dict:
    """done.json's analysis numbers: every probe's scalars (null where undefined: a correlation of tied values, a
    spread of one draw; JSON has no NaN), and how many images they were measured on."""
    scalars = {name: float(value) for result in results.values() for name, value in result.scalars.items()}
    return {**{k: rounded(v) if math.isfinite(v) else None for k, v in scalars.items()}, "analysis_images": num_images}


def history_rows(rows: Iterable[Mapping], prefix: str = "") -> list[dict]:
    """Tracked values, one row per epoch: ``{"epoch": epochs trained, name: value}``, from the callback's
    checkpointed history (``prefix`` ""), or from metrics.csv's rows (``prefix`` "track/"). An earlier version
    kept one row per layer (epoch, layer, distance, entropy), read as today's ``layer<l>/<name>``."""
    merged: dict[int, dict] = {}
    for row in rows:
        if row.get("epoch") in (None, ""):
            continue
        epoch, layer = int(float(row["epoch"])), row.get("layer")
        values = merged.setdefault(epoch, {"epoch": epoch})
        for key, value in row.items():
            if key in ("epoch", "layer") or value in (None, "") or not key.startswith(prefix):
                continue
            name = key.removeprefix(prefix)
            values[name if layer is None else f"layer{int(layer)}/{LEGACY_COLUMNS.get(name, name)}"] = float(value)
    return [row for _, row in sorted(merged.items()) if len(row) > 1]
