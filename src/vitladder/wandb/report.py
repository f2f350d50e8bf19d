"""The ladder's saved W&B Report, built from code (wandb-workspaces): its panels read only keys the project's runs
log; a rung of several seeds is one line (runs grouped by ``config.rung``: mean and standard error)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from contextlib import suppress
from pathlib import Path

from vitladder.atomic import write_text
from vitladder.errors import UserError
from vitladder.wandb.artifacts import declare_inputs, run_artifacts, safe_name
from vitladder.wandb.run import failure, init_timeout_s, report_run_id, resolve_mode, start_run

Chart = tuple[str, str, str, str, str]  # a custom chart: (table, x, y, stroke, title)
URL_FILE = "wandb_report_url.txt"  # the saved Report's address, so that rebuilding it updates the same one
READING = (
    "Every number comes from the runs of this ladder. **The ladder beside the article**: the report run's "
    "table (project and reference figures side by side; with several seeds, mean and 95% CI) and charts by "
    "rung in ladder order (rung_index: 0 = the first rung). **Training**: one line per rung (seeds "
    "averaged, shaded: standard error) against epochs trained. **Per head**: every rung's 42 heads, with "
    "rung, rung_index and seed columns to filter and sort by."
)


def log_report_run(
    ladder_dir: Path,
    tables: Mapping[str, tuple[list[str], list[list]]],
    charts: Mapping[str, Chart],
    summary: Mapping,
    figures: Sequence[str],
    runs: Sequence[tuple[str, int, Path]],
    *,
    project: str,
    group: str,
    entity: str | None,
    mode: str,
) -> str | None:
    """Logs into the ladder's report run the tables ``report/ladder``, ``/runs`` and ``/layers`` (name -> (columns,
    rows)), a custom chart per ``charts`` key (wandb.plot.line stores its table as "<key>_table"), the PNGs
    ``figures`` of ``ladder_dir`` and ``summary``; ``runs`` (rung, seed, run folder) are its inputs. Returns the
    run's id (None: W&B disabled)."""
    import wandb

    mode = resolve_mode(mode)
    if mode == "disabled":
        return None
    about = {"ladder": group, "rungs": list(dict.fromkeys(rung for rung, _, _ in runs))}
    run = start_run(
        mode,
        project=project,
        entity=entity,
        group=group,
        job_type="report",
        name=f"{group}/report",
        id=report_run_id(project, group),
        resume="allow",
        dir=str(ladder_dir),
        config=about,
    )
    try:
        declare_inputs(run, run_artifacts(group, runs))
        logged = {name: wandb.Table(columns=columns, data=rows) for name, (columns, rows) in tables.items()}
        payload: dict = {f"report/{name}": logged[name] for name in ("ladder", "runs", "layers")}
        for key, (table, x, y, stroke, title) in charts.items():
            payload[key] = wandb.plot.line(logged[table], x, y, stroke=stroke, title=title)
        payload |= {f"report/{Path(name).stem}": wandb.Image(str(ladder_dir / name)) for name in figures}
        run.log(payload)
        run.summary.update(summary)
        artifact = wandb.Artifact(safe_name(f"report-{group}"), type="report", metadata=about)
        for name in ("report.md", "ladder.csv", *figures):
            artifact.add_file(str(ladder_dir / name), name=name)
        run.log_artifact(artifact, aliases=["latest"])
        return run.id
    finally:
        run.finish()


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
    key); else one line saying why not. W&B's request limits set here hold for the rest of the process (the
    Report's save included): call it from a command, not beside a training run."""
    import wandb

    # W&B's service asks the server twice at most, the init timeout each (in whole seconds: it drops fractions, and 0
    # is no limit), and answers this process, which waits longer: by default it retries an unanswered request for
    # minutes, and where this process stops waiting first, the service misses the exit hook that ends it and the
    # command hangs. The x_ settings are W&B's own knobs for its GraphQL client (0 retries means its default);
    # tests/wandb/test_report.py asks a server that never answers.
    attempt_s = math.ceil(init_timeout_s())
    wandb.setup(
        wandb.Settings(x_graphql_retry_max=1, x_graphql_timeout_seconds=attempt_s, x_graphql_retry_wait_max_seconds=1)
    )
    try:
        if wandb.login(prompt=False, verify=False):
            api = wandb.Api(timeout=2 * attempt_s + 10)  # W&B asks its server who the API key belongs to
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
