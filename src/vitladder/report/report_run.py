"""What the ladder shows in W&B, as plain rows that ``vitladder.wandb.report`` logs: the report run's tables (the
ladder beside the article's figures, every run, the per-layer values) and charts, and the saved Report's lines over
the rung runs. Every table says which rung (``rung``, ``rung_index`` = position in the ladder) and which seeds its
rows come from.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from vitladder.config import get_rung, rung_index, rung_names
from vitladder.config_schema import ReferenceFigures
from vitladder.report.ladder_report import RungResult, collect, figures, mean_ci, probe_columns, probe_layers
from vitladder.report.ladder_report import ladder_columns as csv_columns
from vitladder.report.setting import SETTING_COLUMNS
from vitladder.run_folder import EPOCH, LR
from vitladder.wandb.report import Chart, log_report_run
from vitladder.wandb.run import GLOBAL_STEP, wandb_failure_warns

__all__ = ["charts", "log_report_to_wandb", "report_tables", "rung_lines", "wandb_names"]

PROJECT, REFERENCE_SERIES, UNIFORM = "this project", "reference (article)", "uniform attention"


def _by_rung(results: list[RungResult]) -> list[tuple[str, str, str, str | None]]:
    """(key, chart, title, uniform key) of each value charted by rung beside the reference: test accuracy, and each
    probe column that asks for it (``Column.by_rung``)."""
    test_acc = ("test_acc", "test_acc", "test accuracy by rung (rung_index: 0 = the first rung)", None)
    columns = probe_columns(results)
    return [test_acc, *((c.key, c.by_rung, f"{c.header or c.key} by rung", c.uniform) for c in columns if c.by_rung)]


def charts(results: list[RungResult]) -> dict[str, Chart]:
    """Custom charts: key -> (table, x, y, stroke, title): the values charted by rung, and each per-layer value the
    probes draw (``ByLayer.figure``) by layer."""
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

    tables = {"ladder": (ladder_columns, ladder), "runs": (runs_columns, runs), "layers": (layers_columns, layers)}
    for key, chart, _, uniform_key in _by_rung(results):
        rows = [row for rung in rung_names() for row in _series_rows(by_rung.get(rung), rung, key)]
        for rung in rung_names() if uniform_key else ():  # the uniform baseline the values are read against
            result = by_rung.get(rung)
            uniform, _ = _mean(result.values(uniform_key)) if result else (None, None)
            uniform = uniform if uniform is not None else get_rung(rung).reference.get(uniform_key)
            if uniform is not None:
                rows.append([rung, rung_index(rung), _seeds(result) if result else "", UNIFORM, uniform])
        tables[f"{chart}_by_rung"] = (["rung", "rung_index", "seeds", "series", key], rows)
    return tables


def rung_lines(results: list[RungResult]) -> tuple[tuple[str, str, str], ...]:
    """(x, y, title) of the saved Report's line plots over the rung runs, one line per rung: accuracy, loss, each
    probe column tracked in training (layer-1 distance and entropy, the position embeddings' grid correlation), the
    learning rate."""
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
    return (
        names.get("project") or "vit-ladder",
        names.get("entity"),
        ladder if isinstance(ladder, str) else ladder_dir.name,
    )


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
    ladder_dir = Path(ladder_dir)
    results = collect(ladder_dir)
    logged_project, _, logged_ladder = wandb_names(results, ladder_dir)
    tables = report_tables(results)
    columns, ladder = tables["ladder"]
    stats = [columns.index(key) for key in csv_columns(results)[1:]]
    summary = {f"report/{row[0]}/{columns[i]}": row[i] for row in ladder for i in stats if row[i] is not None}
    return log_report_run(
        ladder_dir,
        tables,
        charts(results),
        summary,
        figures(results),
        [(r.rung, run.seed, run.path) for r in results for run in r.runs],
        project=project or logged_project,
        group=group or logged_ladder,
        entity=entity,
        mode=mode,
    )
