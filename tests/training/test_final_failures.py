"""A failure once training has started (W&B, the disk, the report, the demo) keeps what was trained and
analysed, leaves the rung resumable or finished, and is one line saying what failed.

One rung lives through a failure at each of its steps in turn, each time run again with the same command;
then a finished ladder's report, demo and W&B report run fail one at a time."""

from __future__ import annotations

import errno
import json
import os
import sys
from pathlib import Path

import lightning as L
import pytest
import wandb
from entry_points import load_script
from omegaconf import OmegaConf

from vitladder.cli import one_line
from vitladder.errors import UserError, describe_os_error
from vitladder.pipeline import train_rung
from vitladder.run_folder import RunPaths, is_finished, read_summary
from vitladder.training import results as results_module
from vitladder.training import run as run_module
from vitladder.training.checkpoint_io import checkpoint_epoch
from vitladder.training.ladder import plan_ladder

REPLACE = os.replace


class WandbFailsAtEpoch(L.Callback):
    """What a W&B server that stops answering raises from inside training."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_train_epoch_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if trainer.current_epoch == self.epoch:
            raise wandb.errors.CommError("the server stopped answering")


def full_disk_at(monkeypatch, name: str | None) -> None:
    """os.replace refuses to make ``name`` visible, as a full disk refuses its last write (None: a disk with room)."""

    def replace(src, dst, *args, **kwargs):
        if Path(dst).name == name:
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        return REPLACE(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)


def shown(caught) -> list[str]:
    """The project's own warnings as the entry points print them (vitladder.cli.one_line)."""
    lines = [one_line(w.message, w.category, w.filename, w.lineno) for w in caught]
    return [line for line in lines if line.startswith("warning: ")]


def test_each_step_after_training_fails_in_turn_and_the_rung_still_finishes(tiny_cfg, monkeypatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    cfg = tiny_cfg("patch8", "profile.epoch_scale=0.02", "model.depth=2", "analysis.num_images=8")  # 2 epochs
    paths = RunPaths(Path(cfg.run_dir))

    build_trainer = run_module.build_trainer
    monkeypatch.setattr(
        run_module,
        "build_trainer",
        lambda cfg, loggers, callbacks: build_trainer(cfg, loggers, [*callbacks, WandbFailsAtEpoch(1)]),
    )
    with pytest.raises(UserError) as failed:  # train.py prints it as one line, `error: ...`
        train_rung(cfg)
    assert str(failed.value) == (
        "W&B failed during training (CommError: the server stopped answering): run the same command again to "
        "resume from the last checkpoint, or train without it (wandb.mode=offline, or disabled)"
    )
    assert checkpoint_epoch(paths.last_ckpt) == 1 and wandb.run is None, "epoch 1 kept; the W&B run closed"
    monkeypatch.setattr(run_module, "build_trainer", build_trainer)

    full_disk_at(monkeypatch, "heads.csv")  # resumed: epoch 2 trains, then the analysis cannot be written
    with pytest.raises(OSError) as failed:
        train_rung(cfg)
    assert describe_os_error(failed.value).startswith(f"{paths.analysis / 'heads.csv'}: No space left on device")
    assert checkpoint_epoch(paths.last_ckpt) == 2 and not is_finished(paths.root), "the trained epochs are kept"

    full_disk_at(monkeypatch, "done.json")  # resumed: nothing to train; tested, analysed and saved, but not marked
    with pytest.raises(OSError, match="No space left"):
        train_rung(cfg)
    assert paths.model.is_file() and (paths.analysis / "heads.csv").is_file() and not is_finished(paths.root)

    def refused(*args, **kwargs):
        raise wandb.errors.CommError("artifact upload refused")

    full_disk_at(monkeypatch, None)
    monkeypatch.setattr(results_module, "log_rung_artifacts", refused)
    with pytest.warns(UserWarning) as caught:
        summary = train_rung(cfg)  # W&B's last step fails: a warning, and the rung finishes
    assert shown(caught) == [
        "warning: W&B could not log the rung's final summary and artifacts (CommError: artifact upload refused): "
        f"the rung is finished and saved in {paths.root} (scripts/analyze.py logs its analysis again)\n"
    ]
    assert read_summary(paths.root) == summary and summary["epochs"] == 2 and wandb.run is None
    assert paths.model.is_file() and (paths.analysis / "layers.csv").is_file()
    stamp = paths.done.stat().st_mtime_ns
    assert train_rung(cfg) == summary and paths.done.stat().st_mtime_ns == stamp, "finished: skipped"


@pytest.fixture
def finished_ladder(tmp_path, monkeypatch) -> tuple[list[str], Path]:
    """scripts/ladder.py's arguments for a smoke ladder whose every rung has finished (its config.yaml and
    done.json, as test_ladder's runs), and the ladder's folder."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    args = ["--data", "synthetic", "profile=smoke", f"output_root={tmp_path}"]
    for run in plan_ladder([0], args[2:] + ["data=synthetic"]):
        run.run_dir.mkdir(parents=True)
        (run.run_dir / "config.yaml").write_text(OmegaConf.to_yaml(run.cfg, resolve=True))
        (run.run_dir / "done.json").write_text(json.dumps({"rung": run.rung, "seed": 0, "test_acc": 0.5}))
    return args, tmp_path / "smoke"


def run_ladder_script(args: list[str], capsys) -> tuple[int, str]:
    try:
        load_script("ladder").main(args)
    except SystemExit as exit_info:
        return int(exit_info.code), capsys.readouterr().err
    return 0, capsys.readouterr().err


def test_a_demo_that_cannot_be_written_is_one_line_after_the_report(finished_ladder, monkeypatch, capsys):
    from vitladder.demo import export

    args, ladder = finished_ladder
    full = OSError(errno.ENOSPC, "No space left on device", str(ladder / "epochs200" / "demo" / "data.js"))

    def full_disk(run_dir, **kwargs):
        raise full

    monkeypatch.setattr(export, "export_demo", full_disk)
    code, err = run_ladder_script(args, capsys)
    assert code == 2 and err == f"error: {describe_os_error(full)}\n"
    rungs = [run for run in ladder.iterdir() if run.is_dir() and run.name != "wandb"]  # wandb/: the report run's
    assert rungs and all(is_finished(run) for run in rungs)
    assert (ladder / "report.md").is_file() and "Browser demo" not in (ladder / "report.md").read_text()


def test_a_report_that_cannot_be_written_is_one_line(finished_ladder, capsys, monkeypatch):
    args, ladder = finished_ladder
    (ladder / "epochs200" / "demo").mkdir()
    (ladder / "epochs200" / "demo" / "index.html").write_text("exported before")
    full_disk_at(monkeypatch, "report.md")
    code, err = run_ladder_script(args, capsys)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"error: {ladder / 'report.md'}: No space left on device")
    assert all(is_finished(run) for run in ladder.iterdir() if run.is_dir())


def test_a_report_run_wandb_refuses_is_one_warning_and_the_ladder_finishes(finished_ladder, capsys, monkeypatch):
    args, ladder = finished_ladder
    (ladder / "epochs200" / "demo").mkdir()
    (ladder / "epochs200" / "demo" / "index.html").write_text("exported before")

    def unreachable(**kwargs):
        raise wandb.errors.CommError("server unreachable")

    monkeypatch.setattr(wandb, "init", unreachable)
    with pytest.warns(UserWarning) as caught:
        code, _ = run_ladder_script(args, capsys)
    assert code == 0 and (ladder / "report.md").is_file() and (ladder / "ladder.csv").is_file()
    assert [line for line in shown(caught) if "W&B" in line] == [  # (the fake rungs have no layers to plot)
        "warning: W&B could not log the ladder's report run (CommError: server unreachable): "
        "report.md and ladder.csv are written; make report logs it again\n"
    ]
    assert "wandb" in sys.modules and wandb.run is None
