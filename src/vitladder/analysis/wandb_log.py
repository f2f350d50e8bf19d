"""A run's final attention analysis in W&B: scalars in the run summary, tables, custom charts, figures.

Nothing here goes into the history as a scalar: a per-layer value logged once would make one line
panel per key with a single dot. The tables carry rung, rung_index and seed, so the per-head tables
of several runs can be concatenated and compared in one W&B panel.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from vitladder.analysis.metrics import declared
from vitladder.analysis.outputs import head_rows, heads_columns, layer_rows, layers_columns
from vitladder.analysis.summary import AttentionSummary
from vitladder.config import rung_index

__all__ = ["analysis_summary_keys", "by_layer_charts", "log_analysis", "log_reanalysis", "run_columns"]

RUN_COLUMNS = ("rung", "rung_index", "seed")


def run_columns(rung: str, seed: int) -> dict:
    """The columns that say which run a table row comes from."""
    return {"rung": rung, "rung_index": rung_index(rung), "seed": int(seed)}


def by_layer_charts() -> dict[str, str]:
    """Custom charts (wandb.plot.line over the layers table), logged as analysis/<name>_by_layer: {name: title},
    one per metric shown in W&B."""
    return {m.name: m.axis_label for m in declared("wandb")}


def analysis_summary_keys(summary: AttentionSummary) -> dict[str, float]:
    """The run-summary scalars: per layer each metric shown in W&B, and their uniform values."""
    shown = declared("wandb")
    scalars: dict[str, float] = {}
    for row in layer_rows(summary):
        for metric in shown:
            scalars[f"analysis/layer{row['layer']}/{metric.name}"] = row[metric.name]
    for metric in shown:
        if metric.name in summary.uniform:
            scalars[f"analysis/uniform_{metric.name}"] = round(float(summary.uniform[metric.name]), 6)
    scalars["analysis/images"] = summary.num_images
    return scalars


def log_analysis(run, summary: AttentionSummary, files: Mapping[str, Path], rung: str, seed: int) -> None:
    """The analysis tables (analysis/heads, analysis/layers), by-layer charts and PNGs into ``run``'s
    media, and its scalars into ``run.summary``."""
    import wandb

    ident = run_columns(rung, seed)

    def table(columns: tuple[str, ...], rows: list[dict]) -> wandb.Table:
        return wandb.Table(columns=[*RUN_COLUMNS, *columns], data=[[*ident.values(), *r.values()] for r in rows])

    layers = table(layers_columns(), layer_rows(summary))
    charts = {
        f"analysis/{key}_by_layer": wandb.plot.line(layers, "layer", key, title=f"{rung}: {title} by layer")
        for key, title in by_layer_charts().items()
    }
    images = {
        f"analysis/figures/{name}": wandb.Image(str(path))
        for name, path in files.items()
        if Path(path).suffix == ".png"
    }
    run.log(
        {"analysis/heads": table(heads_columns(), head_rows(summary)), "analysis/layers": layers, **charts, **images}
    )
    run.summary.update(analysis_summary_keys(summary))


def log_reanalysis(cfg, run_dir: Path, summary: AttentionSummary, files: Mapping[str, Path], mode: str) -> str | None:
    """A re-analysis of a rung folder reaches its W&B run: the run is continued by its stored id and gets
    the new summary, tables and charts, and a new version of its analysis artifact. Returns the run id,
    or None when the rung has no W&B run or W&B is disabled."""
    from vitladder.run_folder import RunPaths
    from vitladder.training.wandb_artifacts import analysis_artifact
    from vitladder.training.wandb_run import resume_rung_run

    run = resume_rung_run(cfg, run_dir, mode)
    if run is None:
        return None
    try:
        log_analysis(run, summary, files, str(cfg.rung), int(cfg.seed))
        run.log_artifact(
            analysis_artifact(RunPaths(Path(run_dir)).analysis, str(cfg.ladder), str(cfg.rung), int(cfg.seed)),
            aliases=["latest", str(cfg.rung)],
        )
        return run.id
    finally:
        run.finish()
