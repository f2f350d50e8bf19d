"""The ladder's one W&B report run: the ladder table beside the article's figures, and the charts.

Its id is derived from project and ladder (``report_run_id``), so rebuilding the report continues
the same run instead of adding one. It uses every reported rung's model and analysis artifacts
(``declare_inputs``: online as W&B inputs, always listed in its config), logs the tables of
``report_tables`` with custom charts over them, the report's PNGs, and its files as a ``report``
artifact. Every table says which rung (``rung``, ``rung_index`` = position in the ladder) and which
seeds its rows come from.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from vitladder.config import get_rung, rung_index, rung_names
from vitladder.config_schema import ReferenceFigures
from vitladder.report.ladder_report import RungResult, collect, figures, mean_ci, probe_columns, probe_layers
from vitladder.report.ladder_report import ladder_columns as csv_columns
from vitladder.report.setting import SETTING_COLUMNS
from vitladder.run_folder import RunPaths, final_model
from vitladder.training.wandb_run import wandb_failure_warns

__all__ = ["charts", "log_report_to_wandb", "report_tables", "rung_artifacts"]

PROJECT, REFERENCE_SERIES, UNIFORM = "this project", "reference (article)", "uniform attention"


def charts(results: list[RungResult]) -> dict[str, tuple[str, str, str, str, str]]:
    """Custom charts: key -> (table, x, y, stroke, title); wandb.plot.line stores each table as "<key>_table".
    Test accuracy and each probe column with a chart by rung (``Column.by_rung``) by rung beside the reference, and
    each per-layer value the probes draw (``ByLayer.figure``) by layer."""
    test_acc = (
        "test_acc_by_rung",
        "rung_index",
        "test_acc",
        "series",
        "test accuracy by rung (rung_index: 0 = the first rung)",
    )
    by_rung = {
        f"report/{c.by_rung}_by_rung": (
            f"{c.by_rung}_by_rung",
            "rung_index",
            c.key,
            "series",
            f"{c.header or c.key} by rung",
        )
        for c in probe_columns(results)
        if c.by_rung
    }
    by_layer = {
        f"report/{value.name}_by_layer": ("layers", "layer", value.name, "rung", f"{value.axis_label} by layer")
        for value in probe_layers(results)
        if value.figure
    }
    return {"report/test_acc_by_rung": test_acc, **by_rung, **by_layer}


def _seeds(result: RungResult) -> str:
    return ",".join(str(run.seed) for run in result.runs)


def _mean(values: list[float]) -> tuple[float | None, float | None]:
    return mean_ci(values) if values else (None, None)


def _series_rows(result: RungResult | None, rung: str, key: str) -> list[list]:
    """Long-format rows [rung, rung_index, seeds, series, value] for a by-rung chart (no reference row for a
    rung the article did not train)."""
    ident = [rung, rung_index(rung), _seeds(result) if result else ""]
    reference = get_rung(rung).reference.get(key)
    rows = [] if reference is None else [[*ident, REFERENCE_SERIES, reference]]
    if result is None:
        return rows
    mean, half = _mean(result.values(key))
    if mean is not None:
        rows.append([*ident, PROJECT, mean])
    if half is not None:  # several seeds: the 95% interval as two more lines
        rows += [[*ident, f"{PROJECT}, 95% CI low", mean - half], [*ident, f"{PROJECT}, 95% CI high", mean + half]]
    return rows


def report_tables(results: list[RungResult]) -> dict[str, tuple[list[str], list[list]]]:
    """{table name: (columns, rows)}: ladder (per rung, every rung of the ladder, with the reference),
    runs (per run), layers (per rung and layer, mean over seeds: each per-layer value of the probes) and the long
    tables of the by-rung charts."""
    by_rung = {r.rung: r for r in results}
    stats = csv_columns(results)[1:]
    ladder_columns = ["rung", "rung_index", "seeds", "n_seeds", "adds"]
    referenced = {f.name for f in fields(ReferenceFigures)}
    for key in stats:
        ladder_columns += [key, f"{key}_ci95"] + ([f"ref_{key}"] if key in referenced else [])
    ladder_columns += [*SETTING_COLUMNS, "ref_epochs"]  # what the rung trained, where it is not the article's
    ladder = []
    for rung in rung_names():
        result, info = by_rung.get(rung), get_rung(rung)
        row = [
            rung,
            rung_index(rung),
            _seeds(result) if result else "",
            len(result.runs) if result else 0,
            info.description,
        ]
        for key in stats:
            row += list(_mean(result.values(key))) if result else [None, None]
            row += [info.reference.get(key)] if key in referenced else []
        setting = result.setting(number="{}") if result else dict.fromkeys(SETTING_COLUMNS)
        ladder.append([*row, *setting.values(), info.reference.get("epochs")])

    runs_columns = ["rung", "rung_index", "seed", "test_acc", "val_acc", *stats[1:], *SETTING_COLUMNS]
    runs = [
        [
            r.rung,
            rung_index(r.rung),
            run.seed,
            run.done.get("test_acc"),
            run.done.get("val_acc"),
            *(one.values(key)[0] if one.values(key) else None for key in stats[1:]),
            *one.setting(number="{}").values(),
        ]
        for r in results
        for run in r.runs
        for one in [RungResult(r.rung, [run])]
    ]

    shown = probe_layers(results)
    layers_columns = ["rung", "rung_index", "seeds", "layer", *(value.name for value in shown)]
    layers = []
    for r in results:
        per_layer = {value.name: r.by_layer(value.name, value.table) for value in shown}  # declared after the run: None
        num_layers = max(map(len, per_layer.values()), default=0)
        layers += [
            [
                r.rung,
                rung_index(r.rung),
                _seeds(r),
                layer,
                *(values[layer] if values else None for values in per_layer.values()),
            ]
            for layer in range(num_layers)
        ]

    by_rung_columns = ["rung", "rung_index", "seeds", "series"]
    test_acc = [row for rung in rung_names() for row in _series_rows(by_rung.get(rung), rung, "test_acc")]
    tables = {
        "ladder": (ladder_columns, ladder),
        "runs": (runs_columns, runs),
        "layers": (layers_columns, layers),
        "test_acc_by_rung": ([*by_rung_columns, "test_acc"], test_acc),
    }
    for column in (column for column in probe_columns(results) if column.by_rung):
        rows = [row for rung in rung_names() for row in _series_rows(by_rung.get(rung), rung, column.key)]
        for rung in rung_names() if column.uniform else ():  # the uniform baseline the values are read against
            result = by_rung.get(rung)
            uniform, _ = _mean(result.values(column.uniform)) if result else (None, None)
            uniform = uniform if uniform is not None else get_rung(rung).reference.get(column.uniform)
            if uniform is not None:
                rows.append([rung, rung_index(rung), _seeds(result) if result else "", UNIFORM, uniform])
        tables[f"{column.by_rung}_by_rung"] = ([*by_rung_columns, column.key], rows)
    return tables


def rung_artifacts(results: list[RungResult], ladder: str) -> list:
    """The model and analysis artifact of every reported run, built from its files: the same digests as
    the versions the rung runs logged (a re-analysis logs the new folder), so W&B finds those."""
    from vitladder.training.wandb_artifacts import analysis_artifact, model_artifact

    artifacts = []
    for result in results:
        for record in result.runs:
            model, analysis = final_model(record.path), RunPaths(record.path).analysis
            if model is not None:
                artifacts.append(model_artifact(model, ladder, result.rung, record.seed))
            if analysis.is_dir():
                artifacts.append(analysis_artifact(analysis, ladder, result.rung, record.seed))
    return artifacts


@wandb_failure_warns("the ladder's report run", "report.md and ladder.csv are written; make report logs it again")
def log_report_to_wandb(
    ladder_dir: str | Path,
    project: str | None = None,
    group: str | None = None,
    mode: str = "auto",
    entity: str | None = None,
) -> str | None:
    """Log the ladder's tables, charts and PNGs into its report run; returns the run's id (None: W&B off).

    ``project``/``group`` default to the runs' config (wandb.project, ladder). Build the report first.
    """
    import wandb

    from vitladder.training.wandb_artifacts import declare_inputs, safe_name
    from vitladder.training.wandb_run import report_run_id, resolve_mode

    ladder_dir = Path(ladder_dir)
    mode = resolve_mode(mode)
    if mode == "disabled":
        return None
    results = collect(ladder_dir)
    config = next((run.config for r in results for run in r.runs if run.config), {})
    project = project or config.get("wandb", {}).get("project") or "vit-ladder"
    group = group or (config.get("ladder") if isinstance(config.get("ladder"), str) else None) or ladder_dir.name
    run = wandb.init(
        project=project,
        entity=entity,
        group=group,
        job_type="report",
        name=f"{group}/report",
        id=report_run_id(project, group),
        resume="allow",
        dir=str(ladder_dir),
        mode=mode,
        config={"ladder": group, "rungs": [r.rung for r in results]},
    )
    try:
        declare_inputs(run, rung_artifacts(results, group))
        rows_of = report_tables(results)
        tables = {name: wandb.Table(columns=columns, data=rows) for name, (columns, rows) in rows_of.items()}
        payload: dict = {f"report/{name}": tables[name] for name in ("ladder", "runs", "layers")}
        for key, (table, x, y, stroke, title) in charts(results).items():
            payload[key] = wandb.plot.line(tables[table], x, y, stroke=stroke, title=title)
        payload.update({f"report/{Path(name).stem}": wandb.Image(str(ladder_dir / name)) for name in figures(results)})
        run.log(payload)
        columns, ladder = rows_of["ladder"]
        run.summary.update(
            {
                f"report/{row[0]}/{key}": row[columns.index(key)]
                for row in ladder
                for key in csv_columns(results)[1:]
                if row[columns.index(key)] is not None
            }
        )
        artifact = wandb.Artifact(
            safe_name(f"report-{group}"), type="report", metadata={"ladder": group, "rungs": [r.rung for r in results]}
        )
        for name in ("report.md", "ladder.csv", *figures(results)):
            artifact.add_file(str(ladder_dir / name), name=name)
        run.log_artifact(artifact, aliases=["latest"])
        return run.id
    finally:
        run.finish()
