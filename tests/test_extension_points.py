"""Every documented extension point works through the real entry points. A copy of the project gets a rung
(conf/step/grad_clip.yaml), a per-head metric (one entry of METRICS), a probe (analysis/probes/confidence.py,
named in analysis.probes on the command line) and a data source (data/sources/stripes.py), nothing else edited;
`python train.py` (W&B offline) trains the new rung on the new source, `make ladder` (W&B disabled) trains the
rest, resumes the new rung and writes the report and the demo; the report's W&B run (offline) and the saved W&B
Report follow the probe too. None prints library noise (Lightning's tips, deprecation notes, the resumed rung's
non-empty checkpoint folder, W&B's anonymous note)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from extensions import (
    CONFIDENCE_PROBE,
    GRAD_CLIP_RUNG,
    PROBES_WITH_CONFIDENCE,
    add_confidence_probe,
    add_confidence_probe_here,
    add_grad_clip_rung,
    add_self_share_metric,
    add_stripes_module,
    copy_project,
)
from omegaconf import OmegaConf

from vitladder.analysis.outputs import read_csv
from vitladder.config import rung_names
from vitladder.report.ladder_report import collect
from vitladder.report.report_run import charts, rung_lines
from vitladder.wandb.report import build_wandb_report

# 30 training images of 16 px, 10 held out for validation, 10 test images: two batches of 10 an epoch.
TINY = [
    "data.val_size=10",
    "data.batch_size=10",
    "data.train_subset=null",
    "data.test_subset=null",
    "model.depth=2",
    "analysis.num_images=8",
    "analysis.track_images=8",
    "trainer.log_every_n_steps=1",
    "trainer.enable_progress_bar=false",
    PROBES_WITH_CONFIDENCE,
]
NOISE = ("Tip:", "litlogger", "litmodels", "LeafSpec", "deprecat", "exists and is not empty", "anonymous", "Traceback")


def noise(output: str) -> list[str]:
    return [line for line in output.splitlines() if any(word in line for word in NOISE)]


@pytest.mark.slow  # a copy of the project trains nine tiny rungs in two child processes
def test_a_new_rung_metric_probe_and_source_run_through_train_py_and_make_ladder(
    repo_root, tmp_path, child_env, wandb_run_reader, monkeypatch
):
    import wandb_workspaces.reports.v2 as wr

    copy = copy_project(repo_root, tmp_path / "project")
    add_grad_clip_rung(copy)
    add_self_share_metric(copy)
    add_stripes_module(copy)
    add_confidence_probe(copy)
    env, out = child_env(PYTHONPATH=str(copy / "src")), tmp_path / "out"
    ladder, run = out / "smoke", out / "smoke" / "grad_clip"

    def quietly(*command: str) -> str:
        """Runs a command in the copy; returns its output, which must hold no library noise."""
        done = subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        assert noise(done.stdout + done.stderr) == []
        return done.stdout + done.stderr

    trained = quietly(
        sys.executable, "train.py", "step=grad_clip", "profile=smoke", "data=stripes", *TINY,
        f"output_root={out}", "wandb.mode=offline",
    )  # fmt: skip
    assert "grad_clip: test accuracy" in trained and (run / "done.json").is_file()
    assert "self_share" in (run / "analysis" / "heads.csv").read_text().splitlines()[0]
    (offline,) = (run / "wandb").glob("offline-run-*")
    record = wandb_run_reader(offline)
    assert [(i["name"], i["type"]) for i in record.config["inputs"]] == [("dataset-stripes", "dataset")]
    assert 0 <= record.summary["analysis/layer1_self_share"] <= 1 and record.config["data"]["source"] == "stripes"
    # The probe: its table and figure as files and in W&B, its scalar in the summary and done.json, its tracked
    # value in metrics.csv and the W&B history against epoch, from initialisation on.
    analysis = run / "analysis"
    rows = read_csv(analysis / "confidence.csv")
    assert len(rows) == 8 and all(0.5 <= float(r["confidence"]) <= 1 for r in rows)  # two classes: at least 1/2
    assert (analysis / "confidence_hist.png").is_file()
    mean = sum(float(r["confidence"]) for r in rows) / len(rows)
    assert record.summary["analysis/mean_confidence"] == pytest.approx(mean, abs=1e-5)
    assert json.loads((run / "done.json").read_text())["mean_confidence"] == pytest.approx(mean, abs=1e-5)
    assert len(record.table("analysis/confidence")["data"]) == 8
    assert "analysis/figures/confidence_hist.path" in record.summary
    epochs = [row["epoch"] for row in record.history if "track/confidence" in row]
    assert epochs == [0, 1, 2] and [r for r in read_csv(run / "metrics.csv") if r.get("track/confidence")]

    (run / "done.json").unlink()  # as a kill just before the rung's last write leaves it: make ladder resumes it
    made = quietly(
        "make", "ladder", f"PY={sys.executable}", "-o", ".venv/.installed", "PROFILE=smoke", "DATA=stripes",
        f"ARGS={' '.join([*TINY, f'output_root={out}', 'wandb.mode=disabled'])}",
    )  # fmt: skip
    rungs = [*rung_names(), "grad_clip"]
    assert "estimated time for 9 runs" in made and "Restored all states" in made
    for rung in rungs:
        summary = json.loads((ladder / rung / "done.json").read_text())
        assert summary["rung"] == rung and summary["layer1_self_share"] >= 0, rung
    report = (ladder / "report.md").read_text()
    results, trained = report.split("## What each rung trained")
    for table in results, trained.split("## Figures")[0]:
        assert [line.split("`")[1] for line in table.splitlines() if line.startswith("| `")] == rungs
    assert "| layer-1 self share |" in report and "gradient clipping at norm 1" in report
    assert "self_share" in (ladder / "ladder.csv").read_text().splitlines()[0]
    assert "| mean confidence |" in report and all(row["mean_confidence"] for row in read_csv(ladder / "ladder.csv"))
    # The probe's per-layer value drawn, one line per rung; its tracked column a panel of tracking_by_epoch.png, where
    # every rung has a line (none left out); in the report run, a column of report/layers, a chart by layer and one
    # by rung; in the saved W&B Report, a line per rung against epoch.
    assert (
        "![confidence per layer](confidence_by_layer.png)" in report and (ladder / "confidence_by_layer.png").is_file()
    )
    tracked = report.split("](tracking_by_epoch.png)\n\n")[1].split("\n")[0]
    assert "mean confidence" in tracked and "Left out" not in tracked and (ladder / "tracking_by_epoch.png").is_file()
    quietly(sys.executable, "scripts/report.py", str(ladder), "--wandb-mode", "offline")
    report_run = wandb_run_reader(next((ladder / "wandb").glob("offline-run-*")))
    layers = report_run.table("report/layers")
    read_out = [row[layers["columns"].index("read_out")] for row in layers["data"]]
    assert len(read_out) == 2 * len(rungs) and all(0 <= value <= 1 for value in read_out)  # depth 2
    assert {"report/read_out_by_layer", "report/confidence_by_rung"} <= {
        key.removeprefix("_wandb.visualize.") for key in report_run.config
    }
    add_confidence_probe_here(tmp_path / "probes", monkeypatch)  # the saved Report is built here, not in the copy
    results = collect(ladder)
    report = build_wandb_report("vit-ladder", "an-entity", "smoke", charts(results), rung_lines(results))
    plots = [panel for block in report.blocks if isinstance(block, wr.PanelGrid) for panel in block.panels]
    (during,) = [panel for panel in plots if isinstance(panel, wr.LinePlot) and panel.y == ["track/confidence"]]
    assert during.x == "epoch" and during.title == "mean confidence during training (0 = initialisation)"
    assert (run / "demo" / "index.html").is_file() and (run / "demo" / "data.js").is_file()


def test_the_readmes_rung_example_is_the_rung_tested(repo_root):
    readme = (repo_root / "README.md").read_text()
    example = readme.split("For example `conf/step/grad_clip.yaml`:\n\n```yaml\n", 1)[1].split("```", 1)[0]
    assert OmegaConf.create(example) == OmegaConf.create(GRAD_CLIP_RUNG)


def test_the_readmes_probe_example_is_the_probe_tested(repo_root):
    readme = (repo_root / "README.md").read_text()
    example = readme.split("`src/vitladder/analysis/probes/confidence.py`:\n\n```python\n", 1)[1].split("```", 1)[0]
    assert example.strip() == CONFIDENCE_PROBE.strip()
