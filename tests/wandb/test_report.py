"""The ladder's W&B report run (one id however often the report is rebuilt) and the saved W&B Report:
built here without saving, every panel must read a key the project's runs really log."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from vitladder.report.ladder_report import collect
from vitladder.report.report_run import charts, rung_lines
from vitladder.wandb.report import URL_FILE, build_wandb_report
from vitladder.wandb.run import report_run_id

REPO = Path(__file__).resolve().parents[2]


def test_rebuilding_the_report_continues_one_run(smoke_ladder, wandb_run_reader) -> None:
    folders = sorted((smoke_ladder / "wandb").glob("offline-run-*"))
    assert len(folders) == 2, "built twice: two parts"
    ids = {wandb_run_reader(f).run["run_id"] for f in folders}
    assert ids == {report_run_id("vit-ladder", "smoke")}
    last = wandb_run_reader(folders[-1])
    assert last.run["job_type"] == "report" and last.run["run_group"] == "smoke" and last.run["resume"]
    (artifact,) = last.artifacts
    assert artifact["type"] == "report" and artifact["name"] == "report-smoke"
    assert {e["path"] for e in artifact["manifest"]["contents"]} >= {"report.md", "ladder.csv", "distance_by_layer.png"}


def test_the_report_run_lists_every_rungs_model_and_analysis_as_logged(smoke_ladder, wandb_run_reader) -> None:
    """Lineage dataset -> rung run -> model -> report: the report run's inputs are the versions the rung
    runs logged (same name, type and digest, which W&B resolves to the logged version). Offline, where W&B
    refuses use_artifact, the run's config `inputs` is that record."""
    rung = wandb_run_reader(next((smoke_ladder / "patch4" / "wandb").glob("offline-run-*")))
    logged = {(a["name"], a["type"], a["digest"]) for a in rung.artifacts}
    for folder in sorted((smoke_ladder / "wandb").glob("offline-run-*")):  # every build of the report
        inputs = {(i["name"], i["type"], i["digest"]) for i in wandb_run_reader(folder).config["inputs"]}
        assert inputs == logged and {kind for _, kind, _ in inputs} == {"model", "analysis"}, folder
    (dataset,) = rung.config["inputs"]  # the rung run's own input: its data set, by the digest of its arrays
    assert dataset["type"] == "dataset" and dataset["name"] == "dataset-synthetic"


RUN_FIELDS = {"group": "run_group", "jobType": "job_type"}  # a run-set filter's run field -> the run record's


def selects(filters, run: dict) -> bool:
    """Whether a run-set filter (wandb-workspaces' parsed expression) selects the run record."""
    if filters.op == "AND":
        return all(selects(leaf, run) for leaf in filters.filters)
    assert filters.key.section == "run" and filters.key.name in RUN_FIELDS and filters.op in ("=", "!="), filters
    equal = run.get(RUN_FIELDS[filters.key.name]) == filters.value
    return equal if filters.op == "=" else not equal


def panel_reads(report) -> list[tuple[object, str, str]]:
    """(run set, what the panel reads, key): the keys of every panel of a wandb-workspaces Report."""
    import wandb_workspaces.reports.v2 as wr

    reads = []
    for block in report.blocks:
        if not isinstance(block, wr.PanelGrid):
            continue
        (runset,) = block.runsets
        for panel in block.panels:
            if isinstance(panel, wr.LinePlot):
                reads += [(runset, "history", panel.x), *((runset, "history", y) for y in panel.y)]
                reads += [(runset, "config", panel.groupby.name)] if panel.groupby else []
            elif isinstance(panel, wr.WeavePanelSummaryTable):
                reads.append((runset, "table", panel.table_name))
            elif isinstance(panel, wr.CustomChart):
                table = panel.query["summaryTable"]["tableKey"]
                reads.append((runset, "table", table))
                reads += [(runset, f"column of {table}", column) for column in panel.chart_fields.values()]
            else:
                raise AssertionError(f"a panel this test does not know how to check: {type(panel).__name__}")
    return reads


def test_every_panel_of_the_wandb_report_reads_a_key_the_runs_log(smoke_ladder, wandb_run_reader) -> None:
    from wandb_workspaces.expr import expr_to_filters

    results = collect(smoke_ladder)
    report = build_wandb_report("vit-ladder", "an-entity", "smoke", charts(results), rung_lines(results))
    rung = wandb_run_reader(next((smoke_ladder / "patch4" / "wandb").glob("offline-run-*")))
    report_run = wandb_run_reader(sorted((smoke_ladder / "wandb").glob("offline-run-*"))[-1])
    reads = panel_reads(report)
    assert len(reads) >= 15 and len({id(runset) for runset, _, _ in reads}) == 2
    assert {key for _, kind, key in reads if kind == "history"} >= {
        "epoch",
        "lr",
        *(y for _, y, _ in rung_lines(results)),
    }
    for runset, kind, key in reads:
        # The run set selects exactly one of the two runs (by group and job type): the panel reads that one.
        (run,) = [r for r in (rung, report_run) if selects(expr_to_filters(runset.filters), r.run)]
        assert (runset.entity, runset.project) == ("an-entity", run.run["project"])
        if kind == "history":
            assert any(key in row for row in run.history), (runset.name, key)
        elif kind == "config":
            assert key in run.config, (runset.name, key)
        elif kind == "table":
            assert run.summary.get(f"{key}._type") == "table-file", (runset.name, key)
        else:
            assert key in run.table(kind.removeprefix("column of "))["columns"], (runset.name, kind, key)


def test_the_wandb_report_draws_the_position_embeddings_forming_per_rung(smoke_ladder, wandb_run_reader) -> None:
    """track/position_grid_correlation against epoch, one line per rung, beside the layer-1 distance and entropy
    panels; the rung run logged it from initialisation on."""
    import wandb_workspaces.reports.v2 as wr

    results = collect(smoke_ladder)
    report = build_wandb_report("vit-ladder", "an-entity", "smoke", charts(results), rung_lines(results))
    (training,) = [b for b in report.blocks if isinstance(b, wr.PanelGrid) and "rung runs" in b.runsets[0].name]
    plots = [panel for panel in training.panels if isinstance(panel, wr.LinePlot)]
    tracked = [panel.y[0] for panel in plots if panel.y[0].startswith("track/")]
    assert tracked == ["track/layer1/distance_px", "track/layer1/entropy_nats", "track/position_grid_correlation"]
    (panel,) = [panel for panel in plots if panel.y == ["track/position_grid_correlation"]]
    assert panel.x == "epoch" and panel.groupby.name == "rung" and panel.groupby_aggfunc == "mean"
    assert panel.title == "position embeddings: ρ(similarity, distance) during training (0 = initialisation)"
    rung = wandb_run_reader(next((smoke_ladder / "patch4" / "wandb").glob("offline-run-*")))
    values = {row["epoch"]: row["track/position_grid_correlation"] for row in rung.history if panel.y[0] in row}
    assert list(values) == [0, 1, 2] and all(-1 <= value <= 1 for value in values.values())


@pytest.mark.parametrize(
    "server", [None, "closed", "silent"], ids=["not-logged-in", "nothing-listens", "never-answers"]
)
def test_the_wandb_report_needs_wandb_online_and_says_so_soon(smoke_ladder, tmp_path: Path, child_env, server) -> None:
    # The command as a user runs it, in a process of its own: its exit waits for W&B's service, which must give up
    # on a server that never answers in about the init timeout (by default it retries for minutes).
    key = "k" * 40 if server else ""
    env = child_env(WANDB_MODE="", WANDB_API_KEY=key, NETRC=str(tmp_path / "no-netrc"), WANDB_INIT_TIMEOUT="1")
    with socket.create_server(("127.0.0.1", 0)) as silent:  # the system completes connections; nobody reads them
        url = {"closed": "http://127.0.0.1:9", "silent": f"http://127.0.0.1:{silent.getsockname()[1]}"}.get(server)
        if url:
            env["WANDB_BASE_URL"] = url
        command = [sys.executable, str(REPO / "scripts" / "wandb_report.py"), str(smoke_ladder)]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    err = done.stderr
    assert err.startswith("error: ") and err.count("\n") == 1 and "wandb login" in err and "network" in err, err
    assert (url in err) if url else ("not logged in" in err)  # says why
    # W&B's service gave up and said so before this process stopped waiting for it: the other way round, the exit
    # can hang (not always: the service then misses the exit hook that ends it, depending on timing).
    assert "did not respond in time" not in err, err
    assert not (smoke_ladder / URL_FILE).exists()


def logged_keys(run) -> set[str]:
    """Every key a run logged: history and summary keys (media by their name), custom charts, config keys."""
    flat = {key for row in [*run.history, run.summary] for key in row}
    media = {key.rsplit(".", 1)[0] for key in flat if key.endswith("._type")}
    charts = {key.removeprefix("_wandb.visualize.") for key in run.config if key.startswith("_wandb.visualize.")}
    return flat | media | charts | set(run.config)


def test_the_readme_section_on_reading_w_and_b_names_what_the_runs_log(smoke_ladder, wandb_run_reader) -> None:
    readme = (REPO / "README.md").read_text()
    section = readme.split("### Reading the results in W&B\n", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`([a-z_]+(?:/[a-z0-9_]+)+|lr|epoch|rung|rung_index|seed|n_seeds|inputs)`", section))
    rung = wandb_run_reader(next((smoke_ladder / "patch4" / "wandb").glob("offline-run-*")))
    report_run = wandb_run_reader(sorted((smoke_ladder / "wandb").glob("offline-run-*"))[-1])
    logged = logged_keys(rung) | logged_keys(report_run) | set(report_run.table("report/ladder")["columns"])
    assert len(named) >= 17 and named <= logged, sorted(named - logged)
