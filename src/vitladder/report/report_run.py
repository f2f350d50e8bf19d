"""The ladder in W&B: its report run (tables, charts, PNGs, files) and the saved Report's lines over the rung runs.
Every table says which rung (``rung``, ``rung_index`` = position in the ladder) and seeds its rows come from."""

from __future__ import annotations

from dataclasses import fields
from itertools import zip_longest
from pathlib import Path

from vitladder.config import get_rung, rung_index, rung_names
from vitladder.config_schema import ReferenceFigures
from vitladder.report.ladder_report import RungResult, collect, figures, ladder_columns, probe_columns, probe_layers
from vitladder.report.setting import SETTING_COLUMNS
from vitladder.run_folder import EPOCH, LR
from vitladder.wandb.report import Chart, log_report_run
from vitladder.wandb.run import GLOBAL_STEP, wandb_failure_warns

PROJECT, REFERENCE_SERIES, UNIFORM = "this project", "reference (article)", "uniform attention"


def _by_rung(results: list[RungResult]) -> list[tuple[str, str, str, str | None]]:
    """(key, chart, title, uniform key) of each value charted by rung: test accuracy and each ``Column.by_rung``."""
    test_acc = ("test_acc", "test_acc", "test accuracy by rung (rung_index: 0 = the first rung)", None)
    columns = probe_columns(results)
    return [test_acc, *((c.key, c.by_rung, f"{c.header or c.key} by rung", c.uniform) for c in columns if c.by_rung)]


def charts(results: list[RungResult]) -> dict[str, Chart]:
    """Custom charts, key -> (table, x, y, stroke, title): the values by rung, each ``ByLayer.figure`` by layer."""
    by_rung = {
        f"report/{chart}_by_rung": (f"{chart}_by_rung", "rung_index", key, "series", title)
        for key, chart, title, _ in _by_rung(results)
    }
    by_layer = {
        f"report/{value.name}_by_layer": ("layers", "layer", value.name, "rung", f"{value.axis_label} by layer")
        for value in probe_layers(results)
        if value.figure
    }
    return by_rung | by_layer


def _series_rows(result: RungResult, key: str, uniform_key: str | None) -> list[list]:
    """A by-rung chart's long-format rows [rung, rung_index, seeds, series, value] (no runs: not finished): the
    article's figure, the project's mean (over several seeds, its 95% interval as two more lines), the uniform one."""
    reference, (mean, half) = get_rung(result.rung).reference, result.stats(key)
    series = {REFERENCE_SERIES: reference.get(key), PROJECT: mean}
    if half is not None:
        series |= {f"{PROJECT}, 95% CI low": mean - half, f"{PROJECT}, 95% CI high": mean + half}
    if uniform_key:  # the uniform baseline the values are read against
        uniform = result.stats(uniform_key)[0]
        series[UNIFORM] = uniform if uniform is not None else reference.get(uniform_key)
    ident = [result.rung, rung_index(result.rung), result.seeds]
    return [[*ident, name, value] for name, value in series.items() if value is not None]


def report_tables(results: list[RungResult]) -> dict[str, tuple[list[str], list[list]]]:
    """{table name: (columns, rows)}: ladder (per rung, every rung of the ladder, with the reference), runs (per
    run), layers (per rung and layer, mean over seeds: each per-layer value of the probes) and the long tables of
    the by-rung charts."""
    by_rung, keys = {r.rung: r for r in results}, ladder_columns(results)
    every_rung = [by_rung.get(rung, RungResult(rung, [])) for rung in rung_names()]  # not finished: no runs
    referenced = [f.name for f in fields(ReferenceFigures)]
    per_rung = ["rung", "rung_index", "seeds", "n_seeds", "adds"]
    for key in keys:
        per_rung += [key, f"{key}_ci95"] + ([f"ref_{key}"] if key in referenced else [])
    per_rung += [*SETTING_COLUMNS, "ref_epochs"]  # what the rung trained, where it is not the article's
    ladder = []
    for result in every_rung:
        info = get_rung(result.rung)
        row = {"rung": result.rung, "rung_index": rung_index(result.rung), "n_seeds": 0, "adds": info.description}
        row |= {f"ref_{key}": info.reference.get(key) for key in referenced}
        row |= result.row(keys) if result.runs else {"seeds": ""}  # not finished: the reference only
        ladder.append([row.get(column) for column in per_rung])

    runs_columns = ["rung", "rung_index", "seed", "test_acc", "val_acc", *keys[1:], *SETTING_COLUMNS]
    runs = []
    for r in results:
        for run in r.runs:  # each as a rung of one seed
            row = RungResult(r.rung, [run]).row(keys) | {"seed": run.seed, "val_acc": run.done.get("val_acc")}
            runs.append([row[column] for column in runs_columns])

    shown = probe_layers(results)
    layers_columns = ["rung", "rung_index", "seeds", "layer", *(value.name for value in shown)]
    layers = []
    for r in results:
        per_layer = [r.by_layer(value.name, value.table) for value in shown]  # declared after the run: empty
        ident = [r.rung, rung_index(r.rung), r.seeds]
        layers += [[*ident, layer, *values] for layer, values in enumerate(zip_longest(*per_layer))]

    tables = {"ladder": (per_rung, ladder), "runs": (runs_columns, runs), "layers": (layers_columns, layers)}
    for key, chart, _, uniform_key in _by_rung(results):
        rows = [row for result in every_rung for row in _series_rows(result, key, uniform_key)]
        tables[f"{chart}_by_rung"] = (["rung", "rung_index", "seeds", "series", key], rows)
    return tables


def rung_lines(results: list[RungResult]) -> tuple[tuple[str, str, str], ...]:
    """(x, y, title) of the saved Report's line plots, one line per rung: accuracy, loss, each tracked column, lr."""
    tracked = tuple(
        (EPOCH, f"track/{column.track}", f"{column.header or column.key} during training (0 = initialisation)")
        for column in probe_columns(results)
        if column.track
    )
    return (
        (EPOCH, "val/acc", "validation accuracy"),
        (EPOCH, "train/loss", "training loss"),
        *tracked,
        (GLOBAL_STEP, LR, "learning rate per optimizer step"),
    )


def wandb_names(results: list[RungResult], ladder_dir: Path) -> tuple[str, str | None, str]:
    """The W&B project, entity and ladder (the runs' group) the finished runs were logged under."""
    config = next((run.config for r in results for run in r.runs if run.config), {})
    ladder, names = config.get("ladder"), config.get("wandb", {})
    ladder = ladder if isinstance(ladder, str) else ladder_dir.name
    return names.get("project") or "vit-ladder", names.get("entity"), ladder


@wandb_failure_warns("the ladder's report run", "report.md and ladder.csv are written; make report logs it again")
def log_report_to_wandb(
    ladder_dir: str | Path,
    project: str | None = None,
    group: str | None = None,
    mode: str = "auto",
    entity: str | None = None,
) -> str | None:
    """Log the built report into the ladder's report run (by default under the runs' wandb.project and ladder):
    report_tables(), charts(), the PNGs, the means in the summary. Returns the run's id (None: W&B disabled)."""
    ladder_dir = Path(ladder_dir)
    results = collect(ladder_dir)
    logged_project, _, logged_ladder = wandb_names(results, ladder_dir)
    keys = ladder_columns(results)
    summary = {f"report/{r.rung}/{key}": mean for r in results for key in keys if (mean := r.stats(key)[0]) is not None}
    return log_report_run(
        ladder_dir,
        report_tables(results),
        charts(results),
        summary,
        figures(results),
        [(r.rung, one.seed, one.path) for r in results for one in r.runs],
        project=project or logged_project,
        group=group or logged_ladder,
        entity=entity,
        mode=mode,
    )
