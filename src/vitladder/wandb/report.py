"""The ladder's saved W&B Report, built from code (wandb-workspaces): its panels read only keys the project's runs
log; a rung of several seeds is one line (runs grouped by ``config.rung``: mean and standard error)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import suppress
from pathlib import Path

from vitladder.atomic import write_text
from vitladder.errors import UserError
from vitladder.wandb.run import failure, init_timeout_s

Chart = tuple[str, str, str, str, str]  # a custom chart: (table, x, y, stroke, title)
URL_FILE = "wandb_report_url.txt"  # the saved Report's address, so that rebuilding it updates the same one
READING = (
    "Every number comes from the runs of this ladder. **The ladder beside the article**: the report run's "
    "table (project and reference figures side by side; with several seeds, mean and 95% CI) and charts by "
    "rung in ladder order (rung_index: 0 = the first rung). **Training**: one line per rung (seeds "
    "averaged, shaded: standard error) against epochs trained. **Per head**: every rung's 42 heads, with "
    "rung, rung_index and seed columns to filter and sort by."
)


def build_wandb_report(
    project: str, entity: str, ladder: str, charts: Mapping[str, Chart], lines: Sequence[tuple[str, str, str]]
):
    """The Report (not saved): the report run's tables and ``charts`` (as ``log_report_to_wandb`` logs them), and one
    line per rung of each (x, y, title) in ``lines``."""
    import wandb_workspaces.reports.v2 as wr

    quoted = ladder.replace("'", "\\'")
    runsets = {
        kind: wr.Runset(
            entity=entity, project=project, name=f"{ladder}: {kind}", filters=f"Group = '{quoted}' and {rule}"
        )
        for kind, rule in (("rung runs", "JobType != 'report'"), ("report run", "JobType = 'report'"))
    }
    wide, half = wr.Layout(w=24, h=10), wr.Layout(w=12, h=8)
    ladder_panels = [wr.WeavePanelSummaryTable(table_name="report/ladder", layout=wide)]
    ladder_panels += [
        wr.CustomChart(
            query={"summaryTable": {"tableKey": f"{key}_table"}},
            chart_name="wandb/line/v0",
            chart_fields={"x": x, "y": y, "stroke": stroke},
            chart_strings={"title": title},
        )
        for key, (_, x, y, stroke, title) in charts.items()
    ]
    ladder_panels += [wr.WeavePanelSummaryTable(table_name="report/runs", layout=wide)]
    per_rung = dict(groupby=wr.Config("rung"), groupby_aggfunc="mean", groupby_rangefunc="stderr", layout=half)
    rung_panels = [wr.LinePlot(title=title, x=x, y=[y], **per_rung) for x, y, title in lines]
    rung_panels += [wr.WeavePanelSummaryTable(table_name="analysis/heads", layout=wide)]
    return wr.Report(
        project=project,
        entity=entity,
        title=f"vit-ladder: {ladder}"[:128],
        description="Accuracy and attention locality up the ladder of recipe fixes, beside the article's figures.",
        blocks=[
            wr.P(READING),
            wr.H2("The ladder beside the article"),
            wr.PanelGrid(runsets=[runsets["report run"]], panels=ladder_panels),
            wr.H2("Training and locality forming, one line per rung"),
            wr.PanelGrid(runsets=[runsets["rung runs"]], panels=rung_panels),
        ],
    )


def online_entity(entity: str | None) -> str:
    """``entity``, or the W&B user's default entity, once W&B is online (logged in, its server answering the API
    key); else one line saying why not."""
    import wandb

    try:
        if wandb.login(prompt=False, verify=False):
            api = wandb.Api(timeout=init_timeout_s())  # W&B asks its server who the API key belongs to
            return entity or api.default_entity
        reason = "not logged in"
    except wandb.Error as error:
        reason = failure(error)
    raise UserError(
        f"a saved W&B Report needs W&B online ({reason}): run `wandb login` on a machine with a network, "
        "upload offline runs with `make wandb-sync`, then `make wandb-report` again"
    )


def save_wandb_report(ladder_dir: Path, report) -> str:
    """Saves ``report`` over the Report saved last time from ``ladder_dir``, if it still exists; returns its address."""
    import wandb_workspaces.reports.v2 as wr

    url_file = Path(ladder_dir) / URL_FILE
    with suppress(Exception):  # none saved before, or deleted or unreadable since: a new one
        existing = wr.Report.from_url(url_file.read_text().strip())
        existing.title, existing.description, existing.blocks = report.title, report.description, report.blocks
        report = existing
    report.save()
    write_text(url_file, report.url + "\n")
    return report.url
