"""A saved W&B Report of one ladder, built from code with wandb-workspaces (``make wandb-report``).

Two run sets: the ladder's rung runs (group = the ladder) and its report run. The panels read only
keys the project logs: the report run's tables and custom-chart tables (``report.wandb_run``), the
rung runs' epoch-level metrics and the values the probes track (``Column.track``) against ``epoch``,
``lr`` against the optimizer step, and their per-head tables. Rungs with several seeds are one line
each: runs grouped by ``config.rung``, mean and standard error across seeds.
"""

from __future__ import annotations

from vitladder.report.ladder_report import RungResult, probe_columns
from vitladder.report.wandb_run import charts

__all__ = ["build_wandb_report", "rung_lines"]


def rung_lines(results: list[RungResult]) -> tuple[tuple[str, str, str], ...]:
    """(x, y, title) of the line plots over the rung runs, one line per rung: accuracy, loss, each probe column
    tracked in training (layer-1 distance and entropy, the position embeddings' grid correlation), the learning
    rate."""
    tracked = tuple(
        ("epoch", f"track/{column.track}", f"{column.header or column.key} during training (0 = initialisation)")
        for column in probe_columns(results)
        if column.track
    )
    return (
        ("epoch", "val/acc", "validation accuracy"),
        ("epoch", "train/loss", "training loss"),
        *tracked,
        ("trainer/global_step", "lr", "learning rate per optimizer step"),
    )


READING = (
    "Every number comes from the runs of this ladder. **The ladder beside the article**: the report run's "
    "table (project and reference figures side by side; with several seeds, mean and 95% CI) and charts by "
    "rung in ladder order (rung_index: 0 = the first rung). **Training**: one line per rung (seeds "
    "averaged, shaded: standard error) against epochs trained. **Per head**: every rung's 42 heads, with "
    "rung, rung_index and seed columns to filter and sort by."
)


def _chart(key: str, title: str, x: str, y: str, stroke: str):
    import wandb_workspaces.reports.v2 as wr

    return wr.CustomChart(
        query={"summaryTable": {"tableKey": f"{key}_table"}},
        chart_name="wandb/line/v0",
        chart_fields={"x": x, "y": y, "stroke": stroke},
        chart_strings={"title": title},
    )


def build_wandb_report(project: str, entity: str, ladder: str, results: list[RungResult]):
    """The Report object (not saved) over the ladder's finished rungs ``results`` (``ladder_report.collect``: which
    probes they ran): ``report.save()`` publishes it."""
    import wandb_workspaces.reports.v2 as wr

    quoted = ladder.replace("'", "\\'")
    rungs = wr.Runset(
        entity=entity,
        project=project,
        name=f"{ladder}: rung runs",
        filters=f"Group = '{quoted}' and JobType != 'report'",
    )
    report_run = wr.Runset(
        entity=entity,
        project=project,
        name=f"{ladder}: report run",
        filters=f"Group = '{quoted}' and JobType = 'report'",
    )
    wide, half = wr.Layout(w=24, h=10), wr.Layout(w=12, h=8)
    ladder_panels = [wr.WeavePanelSummaryTable(table_name="report/ladder", layout=wide)]
    ladder_panels += [_chart(key, title, x, y, stroke) for key, (_, x, y, stroke, title) in charts(results).items()]
    ladder_panels += [wr.WeavePanelSummaryTable(table_name="report/runs", layout=wide)]
    rung_panels = [
        wr.LinePlot(
            title=title,
            x=x,
            y=[y],
            groupby=wr.Config("rung"),
            groupby_aggfunc="mean",
            groupby_rangefunc="stderr",
            layout=half,
        )
        for x, y, title in rung_lines(results)
    ]
    rung_panels += [wr.WeavePanelSummaryTable(table_name="analysis/heads", layout=wide)]
    return wr.Report(
        project=project,
        entity=entity,
        title=f"vit-ladder: {ladder}"[:128],
        description="Accuracy and attention locality up the ladder of recipe fixes, beside the article's figures.",
        blocks=[
            wr.P(READING),
            wr.H2("The ladder beside the article"),
            wr.PanelGrid(runsets=[report_run], panels=ladder_panels),
            wr.H2("Training and locality forming, one line per rung"),
            wr.PanelGrid(runsets=[rungs], panels=rung_panels),
        ],
    )
