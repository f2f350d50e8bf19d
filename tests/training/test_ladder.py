"""The ladder runner: data and seed arguments, the plan, and the smoke ladder end to end."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from vitladder.config import RUNGS
from vitladder.errors import UserError
from vitladder.training.ladder import data_overrides, format_seconds, parse_seeds, plan_ladder, run_ladder


def test_data_argument_picks_a_source_or_a_folder():
    assert data_overrides("") == []
    assert data_overrides("synthetic") == ["data=synthetic"]
    assert data_overrides("../x/cifar10-jpeg.tar.xz") == ["data=imagefolder", "data.root=../x/cifar10-jpeg.tar.xz"]


def test_seeds_parse_or_fail_clearly():
    assert parse_seeds("0,1,2") == [0, 1, 2] and parse_seeds("") == [0]
    with pytest.raises(UserError, match="SEEDS"):
        parse_seeds("0,one")


def test_plan_covers_every_rung_per_seed_in_order():
    runs = plan_ladder([0, 1], ["profile=smoke"])
    assert [(r.rung, r.seed) for r in runs] == [(rung, s) for s in (0, 1) for rung in RUNGS]
    assert str(runs[0].run_dir) == "outputs/smoke/patch8" and str(runs[8].run_dir) == "outputs/smoke/patch8-seed1"
    with pytest.raises(UserError, match=r"train.py \+step=<rung>"):
        plan_ladder([0], ["profile=smoke", "+step=patch8"])


def test_runner_skips_finished_runs_and_reports_an_eta(tmp_path):
    runs = plan_ladder([0], ["profile=smoke", f"output_root={tmp_path}"])
    finished = runs[0].run_dir
    finished.mkdir(parents=True)
    (finished / "done.json").write_text(json.dumps({"rung": "patch8", "test_acc": 0.5, "seconds": 1}))
    trained, lines = [], []

    def train(cfg):
        trained.append(cfg.rung)
        summary = {"rung": cfg.rung, "test_acc": 0.5, "seconds": 1.0}
        (tmp_path / "smoke" / cfg.rung).mkdir(parents=True, exist_ok=True)
        (tmp_path / "smoke" / cfg.rung / "done.json").write_text(json.dumps(summary))
        return summary

    summaries = run_ladder(runs, train, lambda cfgs: [10.0] * len(cfgs), log=lines.append)
    assert trained == list(RUNGS[1:]) and len(summaries) == 8
    assert lines[0] == "1 of 8 runs already finished: skipping them"
    assert lines[1] == "estimated time for 7 runs on this machine: 1m10s"
    assert "ladder ETA" in lines[3]


def test_format_seconds():
    assert format_seconds(59) == "0m59s" and format_seconds(3725) == "1h02m"


@pytest.mark.slow
def test_smoke_ladder_trains_every_rung(repo_root, tmp_path, child_env):
    started = time.time()
    result = subprocess.run(
        [sys.executable, "scripts/ladder.py", "profile=smoke", f"output_root={tmp_path}", "trainer.progress_bar=false"],
        cwd=repo_root, capture_output=True, text=True, timeout=1800, env=child_env(),
    )
    elapsed = time.time() - started
    assert result.returncode == 0, result.stderr[-3000:]
    assert "estimated time for 8 runs on this machine" in result.stdout
    for rung in RUNGS:
        run_dir = tmp_path / "smoke" / rung
        summary = json.loads((run_dir / "done.json").read_text())
        assert summary["rung"] == rung and summary["epochs"] == (2 if rung == "epochs200" else 1)
        assert (run_dir / "checkpoints" / "model.pt").is_file() and (run_dir / "metrics.csv").is_file()
    print(f"smoke ladder: {elapsed:.0f} s")
