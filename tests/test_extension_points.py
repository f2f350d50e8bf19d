"""Every documented extension point works through the real entry points. A copy of the project gets a rung
(conf/step/grad_clip.yaml), a per-head metric (one entry of METRICS) and a data source
(data/sources/stripes.py), nothing else edited; `python train.py` (W&B offline) trains the new rung on the
new source, `make ladder` (W&B disabled) trains the rest, resumes the new rung and writes the report and the
demo. Neither prints library noise (Lightning's tips, deprecation notes, the resumed rung's non-empty
checkpoint folder, W&B's anonymous note)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from extensions import GRAD_CLIP_RUNG, add_grad_clip_rung, add_self_share_metric, add_stripes_module, copy_project
from omegaconf import OmegaConf

from vitladder.config import rung_names

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
]
NOISE = ("Tip:", "litlogger", "litmodels", "LeafSpec", "deprecat", "exists and is not empty", "anonymous", "Traceback")


def noise(output: str) -> list[str]:
    return [line for line in output.splitlines() if any(word in line for word in NOISE)]


@pytest.mark.slow  # a copy of the project trains nine tiny rungs in two child processes
def test_a_new_rung_metric_and_source_run_through_train_py_and_make_ladder(
    repo_root, tmp_path, child_env, wandb_run_reader
):
    copy = copy_project(repo_root, tmp_path / "project")
    add_grad_clip_rung(copy)
    add_self_share_metric(copy)
    add_stripes_module(copy)
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
    assert (run / "demo" / "index.html").is_file() and (run / "demo" / "data.js").is_file()


def test_the_readmes_rung_example_is_the_rung_tested(repo_root):
    readme = (repo_root / "README.md").read_text()
    example = readme.split("For example `conf/step/grad_clip.yaml`:\n\n```yaml\n", 1)[1].split("```", 1)[0]
    assert OmegaConf.create(example) == OmegaConf.create(GRAD_CLIP_RUNG)
