"""The ladder runner: data and seed arguments, the plan, and the smoke ladder end to end."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from omegaconf import OmegaConf

from vitladder.config import RUNGS
from vitladder.errors import UserError
from vitladder.training.ladder import (PlannedRun, data_overrides, format_seconds, parse_seeds, plan_ladder,
                                       run_ladder)


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
    assert runs[9].overrides == ["step=augment", "profile=smoke", "seed=1"]  # kept in the run folder
    for step in ("+step=patch8", "step=patch8"):
        with pytest.raises(UserError, match=r"train.py step=<rung>"):
            plan_ladder([0], ["profile=smoke", step])


def finish(run: PlannedRun) -> None:
    """A finished run folder as train_rung leaves it: the resolved config.yaml, then done.json."""
    run.run_dir.mkdir(parents=True)
    (run.run_dir / "config.yaml").write_text(OmegaConf.to_yaml(run.cfg, resolve=True))
    (run.run_dir / "done.json").write_text(json.dumps({"rung": run.rung, "test_acc": 0.5, "seconds": 1}))


def test_runner_skips_finished_runs_and_reports_an_eta(tmp_path):
    runs = plan_ladder([0], ["profile=smoke", f"output_root={tmp_path}"])
    finish(runs[0])
    trained, lines = [], []

    def train(cfg, overrides):
        assert overrides[0] == f"step={cfg.rung}"
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


def test_a_changed_recipe_stops_the_ladder_before_it_trains_anything(tmp_path):
    finish(plan_ladder([0], ["profile=smoke", f"output_root={tmp_path}"])[2])  # patch4, finished
    changed = plan_ladder([0], ["profile=smoke", f"output_root={tmp_path}", "optim.lr=0.5"])

    def train(cfg, overrides):
        raise AssertionError("nothing may train")

    with pytest.raises(UserError) as refused:
        run_ladder(changed, train, lambda cfgs: [1.0] * len(cfgs), log=lambda line: None)
    message = str(refused.value)
    assert message.startswith(f"{tmp_path / 'smoke' / 'patch4'} holds a finished run of another recipe")
    assert "optim.lr 0.002 → 0.5" in message and "ladder=NAME" in message and "LADDER=NAME" in message
    assert "overwrite=true" in message and "patch4.replaced-<time>/" in message


def test_overwrite_retrains_a_changed_rung_and_skips_the_rest(tmp_path):
    base = ["profile=smoke", f"output_root={tmp_path}"]
    for run in plan_ladder([0], base):
        finish(run)  # the whole ladder, finished
    changed = plan_ladder([0], [*base, "optim.lr=0.5", "overwrite=true"])
    trained = []
    run_ladder(changed, lambda cfg, overrides: trained.append(cfg.rung) or {"test_acc": 0.5, "seconds": 1.0},
               lambda cfgs: [1.0] * len(cfgs), log=lambda line: None)
    assert trained == list(RUNGS), "every rung's recipe changed: every rung trains again"

    trained.clear()
    same = plan_ladder([0], [*base, "trainer.enable_progress_bar=false", "wandb.mode=disabled", "overwrite=true"])
    run_ladder(same, lambda cfg, overrides: trained.append(cfg.rung), lambda cfgs: [1.0] * len(cfgs),
               log=lambda line: None)
    assert trained == [], "keys outside the recipe change nothing: finished rungs are skipped, even with overwrite"


def test_format_seconds():
    assert format_seconds(59) == "0m59s" and format_seconds(3725) == "1h02m"


@pytest.mark.slow
def test_smoke_ladder_trains_every_rung(repo_root, tmp_path, child_env):
    started = time.time()
    result = subprocess.run(
        [sys.executable, "scripts/ladder.py", "profile=smoke", f"output_root={tmp_path}",
         "trainer.enable_progress_bar=false"],
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
