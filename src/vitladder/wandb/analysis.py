"""A run's final analysis in W&B: every probe's scalars in the run summary (a scalar logged once into the history
would be a one-dot line panel), its tables (with rung, rung_index and seed, to compare runs in one panel), charts
and figures."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from vitladder.config import rung_index
from vitladder.run_folder import rounded, table_columns
from vitladder.wandb.artifacts import log_rung_artifact
from vitladder.wandb.run import rung_run


def log_analysis(run, analysis) -> None:
    """The analysis callback's ``results``, ``files``, ``scalars`` into ``run``: each table as ``analysis/<name>``,
    each chart over it, each PNG as ``analysis/figures/<name>``; the scalars and images counted in the summary."""
    import wandb

    ident = {"rung": analysis.rung, "rung_index": rung_index(analysis.rung), "seed": int(analysis.seed)}
    tables, payload = {}, {}
    for result in analysis.results.values():
        for name, rows in result.tables.items():
            columns = table_columns(rows)
            data = [[*ident.values(), *(rounded(row.get(key)) for key in columns)] for row in rows]
            tables[name] = payload[f"analysis/{name}"] = wandb.Table(columns=[*ident, *columns], data=data)
        for name, chart in result.charts.items():  # over one of the result's own tables
            plot = wandb.plot.scatter if chart.kind == "scatter" else wandb.plot.line
            payload[f"analysis/{name}"] = plot(tables[chart.table], chart.x, chart.y, title=chart.title)
    figures = {name: path for name, path in analysis.files.items() if Path(path).suffix == ".png"}
    payload |= {f"analysis/figures/{name}": wandb.Image(str(path)) for name, path in figures.items()}
    run.log(payload)
    scalars = {f"analysis/{k}": v for k, v in analysis.scalars.items() if v is not None and k != "analysis_images"}
    run.summary.update({**scalars, "analysis/images": analysis.scalars["analysis_images"]})


def log_reanalysis(cfg: DictConfig, run_dir: Path, analysis, mode: str) -> str | None:
    """A re-analysis into the rung folder's W&B run, continued: the new summary, tables, charts and a new version of
    its analysis artifact. Returns the run id (None: no W&B run, or W&B disabled)."""
    run = rung_run(cfg, run_dir, mode, resume_only=True)
    if run is None:
        return None
    try:
        log_analysis(run, analysis)
        log_rung_artifact(run, cfg, "analysis", analysis.out_dir)
        return run.id
    finally:
        run.finish()
