"""A run's final analysis in W&B: every probe's scalars in the run summary, its tables, charts and figures.

Nothing here goes into the history as a scalar: a value logged once would make one line panel per key with a
single dot. The tables carry rung, rung_index and seed, so the tables of several runs can be concatenated and
compared in one W&B panel.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from vitladder.analysis.outputs import done_scalars, rounded, table_columns
from vitladder.analysis.probes import Result
from vitladder.config import rung_index

__all__ = ["log_analysis", "log_reanalysis", "run_columns"]

RUN_COLUMNS = ("rung", "rung_index", "seed")


def run_columns(rung: str, seed: int) -> dict:
    """The columns that say which run a table row comes from."""
    return {"rung": rung, "rung_index": rung_index(rung), "seed": int(seed)}


def log_analysis(
    run, results: Mapping[str, Result], files: Mapping[str, Path], rung: str, seed: int, num_images: int
) -> None:
    """Each table as ``analysis/<name>``, each chart over it, each PNG as ``analysis/figures/<name>``, into
    ``run``'s media; the scalars (``analysis/<name>``) and the images counted into ``run.summary``."""
    import wandb

    ident = run_columns(rung, seed)
    tables, payload = {}, {}
    for result in results.values():
        for name, rows in result.tables.items():
            columns = table_columns(rows)
            data = [[*ident.values(), *(rounded(row.get(key)) for key in columns)] for row in rows]
            tables[name] = payload[f"analysis/{name}"] = wandb.Table(columns=[*RUN_COLUMNS, *columns], data=data)
    for result in results.values():
        for name, chart in result.charts.items():
            plot = wandb.plot.scatter if chart.kind == "scatter" else wandb.plot.line
            payload[f"analysis/{name}"] = plot(tables[chart.table], chart.x, chart.y, title=chart.title)
    payload |= {
        f"analysis/figures/{name}": wandb.Image(str(path)) for name, path in files.items() if path.suffix == ".png"
    }
    run.log(payload)
    scalars = done_scalars(results, num_images)
    images = scalars.pop("analysis_images")
    scalars = {f"analysis/{name}": value for name, value in scalars.items() if value is not None}
    run.summary.update({**scalars, "analysis/images": images})


def log_reanalysis(
    cfg, run_dir: Path, results: Mapping[str, Result], files: Mapping[str, Path], num_images: int, mode: str
) -> str | None:
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
        log_analysis(run, results, files, str(cfg.rung), int(cfg.seed), num_images)
        run.log_artifact(
            analysis_artifact(RunPaths(Path(run_dir)).analysis, str(cfg.ladder), str(cfg.rung), int(cfg.seed)),
            aliases=["latest", str(cfg.rung)],
        )
        return run.id
    finally:
        run.finish()
