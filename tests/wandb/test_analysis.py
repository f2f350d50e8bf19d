"""A re-analysis of a rung folder reaches the rung's W&B run."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

from entry_points import load_script


def test_analyze_updates_the_rungs_wandb_run(smoke_ladder, tmp_path: Path, wandb_run_reader, capsys) -> None:
    run_dir = tmp_path / "patch4"
    shutil.copytree(smoke_ladder / "patch4", run_dir)
    run_id = (run_dir / "wandb_run_id.txt").read_text().strip()
    load_script("analyze").main([str(run_dir), "--images", "10", "--batch-size", "5", "--device", "cpu"])
    assert f"W&B run {run_id}" in capsys.readouterr().out

    folders = sorted((run_dir / "wandb").glob(f"offline-run-*-{run_id}"))
    assert len(folders) == 2, "the re-analysis continues the rung's run"
    update = wandb_run_reader(folders[-1])
    assert update.summary["analysis/images"] == 10
    (artifact,) = update.artifacts
    assert artifact["name"] == "analysis-smoke-patch4-seed0" and artifact["type"] == "analysis"
    layers = update.table("analysis/layers")
    with (run_dir / "analysis" / "layers.csv").open() as file:
        assert [float(r["distance_px"]) for r in csv.DictReader(file)] == [row[4] for row in layers["data"]]
