"""Kill and resume: an interrupted rung resumes exactly, a killed ladder finishes, same seed same numbers."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import wandb
from run_helpers import Crash, CrashAtEpoch, saved_file
from tiny_data import tiny_data

from vitladder.config import rung_names
from vitladder.pipeline import train_rung
from vitladder.run_folder import RunPaths
from vitladder.training import run as run_module

TINY = [
    *tiny_data(num_train=700, num_test=100, val_size=100, batch_size=50),
    "analysis.num_images=20",
    "analysis.track_images=8",
]


def weights(run_dir: Path) -> dict:
    return saved_file(run_dir)["state_dict"]


def epochs_in(metrics_csv: Path) -> list[int]:
    """The epochs (epochs trained) validated in metrics.csv, in the order logged."""
    with metrics_csv.open() as file:
        return [int(float(row["epoch"])) for row in csv.DictReader(file) if row.get("val/acc")]


@pytest.mark.slow
def test_same_seed_gives_the_same_numbers_and_a_resumed_run_the_same_weights(tiny_cfg, monkeypatch, tmp_path):
    # mixup_cutmix + drop path: every global RNG stream matters for the resumed run to match.
    overrides = ["profile.epoch_scale=0.03", *TINY]
    first = train_rung(tiny_cfg("stochastic_depth", *overrides, f"output_root={tmp_path / 'a'}"))
    second = train_rung(tiny_cfg("stochastic_depth", *overrides, f"output_root={tmp_path / 'b'}"))
    assert first["val_acc"] == second["val_acc"] and first["test_acc"] == second["test_acc"]
    runs = {name: tmp_path / name / "smoke" / "stochastic_depth" for name in "abc"}
    assert all(torch.equal(v, weights(runs["b"])[k]) for k, v in weights(runs["a"]).items())

    # Crash at the start of epoch 2 (after epoch 1's checkpoint), then run the same command again.
    build_trainer = run_module.build_trainer
    monkeypatch.setattr(
        run_module,
        "build_trainer",
        lambda cfg, loggers, callbacks: build_trainer(cfg, loggers, [*callbacks, CrashAtEpoch(2)]),
    )
    cfg = tiny_cfg("stochastic_depth", *overrides, f"output_root={tmp_path / 'c'}")
    with pytest.raises(Crash):
        train_rung(cfg)
    assert RunPaths(runs["c"]).last_ckpt.exists() and not RunPaths(runs["c"]).done.exists()
    run_id = (runs["c"] / "wandb_run_id.txt").read_text()
    monkeypatch.setattr(run_module, "build_trainer", build_trainer)
    resumed = train_rung(cfg)

    assert resumed["epochs"] == 3 and resumed["val_acc"] == pytest.approx(first["val_acc"])
    reference = weights(runs["a"])
    for key, value in weights(runs["c"]).items():
        assert torch.allclose(value, reference[key], atol=1e-5), key
    assert epochs_in(RunPaths(runs["c"]).metrics_csv) == [1, 2, 3], "each epoch logged once"
    assert (runs["c"] / "wandb_run_id.txt").read_text() == run_id, "the resumed rung continues its W&B run"


def test_a_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tiny_cfg, monkeypatch):
    from vitladder.training.module import RecipeModule, TrainingDiverged

    training_step = RecipeModule.training_step

    def poisoned(self, batch, batch_idx):
        loss = training_step(self, batch, batch_idx)
        return loss * float("nan") if self.current_epoch == 1 else loss

    monkeypatch.setattr(RecipeModule, "training_step", poisoned)
    cfg = tiny_cfg("patch8", "profile.epoch_scale=0.03", *TINY)
    with pytest.raises(TrainingDiverged, match="in epoch 1"):
        train_rung(cfg)
    paths = RunPaths(Path(cfg.run_dir))
    kept = torch.load(paths.last_ckpt, map_location="cpu", weights_only=True)
    assert kept["epoch"] == 0 and all(torch.isfinite(v).all() for v in kept["state_dict"].values())
    assert not paths.done.exists() and not paths.model.exists()
    assert wandb.run is None  # closed as failed: a later run in this process must not attach to it


class CtrlCAtEpoch(CrashAtEpoch):
    """Ctrl-C at the start of an epoch: what Python's SIGINT handler raises in the training loop."""

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        if trainer.current_epoch == self.epoch:
            raise KeyboardInterrupt


@pytest.mark.slow
def test_ctrl_c_is_one_line_that_says_how_to_resume_and_the_same_command_resumes(tiny_cfg, monkeypatch, capsys):
    from vitladder.cli import reports_user_errors

    build_trainer = run_module.build_trainer
    monkeypatch.setattr(
        run_module,
        "build_trainer",
        lambda cfg, loggers, callbacks: build_trainer(cfg, loggers, [*callbacks, CtrlCAtEpoch(1)]),
    )
    cfg = tiny_cfg("patch8", "profile.epoch_scale=0.03", *TINY)
    paths = RunPaths(Path(cfg.run_dir))
    handler = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit) as stopped:  # Lightning's graceful shutdown ends in sys.exit(1)
            reports_user_errors(lambda: train_rung(cfg))()
    finally:
        signal.signal(signal.SIGINT, handler)  # Lightning ignores further Ctrl-Cs while it shuts down
    assert stopped.value.code == run_module.RunInterrupted.exit_code == 130
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == f"error: {paths.root}: interrupted; run the same command again to resume"
    assert paths.last_ckpt.exists() and not paths.done.exists() and wandb.run is None
    monkeypatch.setattr(run_module, "build_trainer", build_trainer)
    assert train_rung(cfg)["epochs"] == 3 and epochs_in(paths.metrics_csv) == [1, 2, 3]


def wait_for(condition, process: subprocess.Popen, timeout_s: float = 300) -> None:
    deadline = time.time() + timeout_s
    while not condition():
        assert process.poll() is None, f"the ladder ended before the kill point: {process.stdout.read()[-2000:]}"
        assert time.time() < deadline, "kill point never reached"
        time.sleep(0.02)


@pytest.mark.slow
def test_a_ladder_killed_at_any_moment_finishes_when_run_again(repo_root, tmp_path, child_env):
    ladder = tmp_path / "smoke"
    command = [
        sys.executable,
        "scripts/ladder.py",
        "profile=smoke",
        f"output_root={tmp_path}",
        "trainer.enable_progress_bar=false",
        "profile.epoch_scale=0.02",
        *TINY,
    ]
    env = child_env()
    # Kill points: inside patch8's training (first checkpoint written, second not), the instant augment
    # finished (its done.json just renamed into place), and during patch4's analysis.
    kill_points = [
        lambda: (ladder / "patch8" / "checkpoints" / "last.ckpt").exists(),
        lambda: (ladder / "augment" / "done.json").exists(),
        lambda: (ladder / "patch4" / "analysis").is_dir(),
    ]
    finished_before: dict[str, int] = {}
    for kill_point in kill_points:
        process = subprocess.Popen(
            command,
            cwd=repo_root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        wait_for(kill_point, process)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        for done in ladder.glob("*/done.json"):
            finished_before.setdefault(done.parent.name, done.stat().st_mtime_ns)

    result = subprocess.run(command, cwd=repo_root, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "already finished: skipping them" in result.stdout
    for rung in rung_names():
        paths = RunPaths(ladder / rung)
        summary = json.loads(paths.done.read_text())
        assert summary["epochs"] == (4 if rung == "epochs200" else 2), rung
        assert epochs_in(paths.metrics_csv) == list(range(1, summary["epochs"] + 1)), rung
        assert len(list((paths.root / "analysis").glob("*.png"))) >= 3 and paths.model.is_file()
    for rung, stamp in finished_before.items():
        assert (ladder / rung / "done.json").stat().st_mtime_ns == stamp, f"finished {rung} was touched"
    assert not list(ladder.rglob("*.tmp")), "no half-written files left behind"
    assert (ladder / "report.md").is_file() and len((ladder / "ladder.csv").read_text().splitlines()) == 9
