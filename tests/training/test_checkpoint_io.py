"""last.ckpt is written atomically (a full disk keeps the previous one, which still resumes) and read
weights-only (a checkpoint with a pickle payload placed as last.ckpt runs nothing)."""

from __future__ import annotations

import csv
import errno
import io
import os
import stat
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.demos.boring_classes import BoringModel
from omegaconf import OmegaConf
from run_helpers import EpochTakes, FakeClock
from tiny_data import tiny_data

from vitladder.cli import reports_user_errors
from vitladder.config import compose_rung
from vitladder.errors import CheckpointError
from vitladder.pipeline import train_rung
from vitladder.run_folder import RunPaths
from vitladder.training import checkpoint_io
from vitladder.training import run as run_module
from vitladder.training.checkpoint_io import AtomicCheckpointIO, SpacedCheckpoint, checkpoint_epoch, saves_in

TINY = [
    *tiny_data(num_train=700, num_test=100, val_size=100, batch_size=50),
    "analysis.num_images=20",
    "analysis.track_images=8",
]


def epochs_in(metrics_csv: Path) -> list[int]:
    with metrics_csv.open() as file:
        return [int(float(row["epoch"])) for row in csv.DictReader(file) if row.get("val/acc")]  # epochs trained


@pytest.fixture
def umask_007():
    previous = os.umask(0o007)  # outputs must get the umask's mode (0660 here), not mkstemp's 0600
    yield 0o660
    os.umask(previous)


def test_a_full_disk_during_a_checkpoint_keeps_the_previous_one_which_still_resumes(tiny_cfg, monkeypatch, umask_007):
    cfg = tiny_cfg("patch8", "profile.epoch_scale=0.02", *TINY)  # 2 epochs
    paths = RunPaths(Path(cfg.run_dir))
    save, checkpoints = torch.save, []

    def disk_fills_up(obj, file, *args, **kwargs):
        if isinstance(obj, dict) and "loops" in obj:  # a Lightning checkpoint
            checkpoints.append(obj["epoch"])
            if len(checkpoints) == 2:  # the second one: half of it reaches the disk, then the disk is full
                buffer = io.BytesIO()
                save(obj, buffer)
                file.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return save(obj, file, *args, **kwargs)

    monkeypatch.setattr(torch, "save", disk_fills_up)
    with pytest.raises(OSError) as failure:
        train_rung(cfg)
    assert failure.value.errno == errno.ENOSPC and failure.value.filename == str(paths.last_ckpt)
    assert checkpoint_epoch(paths.last_ckpt) == 1, "the first epoch's checkpoint is intact"
    assert not list(paths.root.rglob("*.tmp")), "no temp file left"

    monkeypatch.setattr(torch, "save", save)
    resumed_from = []
    resume = run_module.resume_checkpoint
    monkeypatch.setattr(run_module, "resume_checkpoint", lambda p: resumed_from.append(resume(p)) or resumed_from[-1])
    summary = train_rung(cfg)
    assert resumed_from == [str(paths.last_ckpt)] and summary["epochs"] == 2
    assert epochs_in(paths.metrics_csv) == [1, 2], "each epoch logged once"
    for output in (
        paths.config,
        paths.metrics_csv,
        paths.last_ckpt,
        paths.model,
        paths.done,
        paths.analysis / "heads.csv",
        paths.analysis / "distance.png",
    ):
        assert stat.S_IMODE(output.stat().st_mode) == umask_007, output


def test_a_pickle_payload_as_last_ckpt_runs_nothing_on_resume(tiny_cfg, tmp_path, capsys, payload_checkpoint):
    cfg = tiny_cfg("patch8", *TINY)
    paths = RunPaths(Path(cfg.run_dir))
    marker = tmp_path / "payload-ran"
    payload_checkpoint(paths.last_ckpt, marker, {"epoch": 0, "state_dict": {}, "loops": {}})
    paths.config.write_text(OmegaConf.to_yaml(cfg, resolve=True))  # an interrupted run of this very recipe
    with pytest.raises(SystemExit) as exit_info:
        reports_user_errors(train_rung)(cfg)  # what train.py runs
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and err.startswith("error: "), err
    assert str(paths.last_ckpt) in err and "refused" in err
    assert not marker.exists(), "the checkpoint's code ran"
    assert not (paths.root / "wandb").exists() and not paths.model.exists()


def test_lightning_reads_checkpoints_weights_only_through_the_plugin(tiny_cfg, tmp_path, payload_checkpoint):
    trainer = run_module.build_trainer(tiny_cfg("patch8"), [], [])
    assert isinstance(trainer.strategy.checkpoint_io, AtomicCheckpointIO)
    marker = tmp_path / "payload-ran"
    ckpt = payload_checkpoint(tmp_path / "last.ckpt", marker, {"epoch": 0})
    with pytest.raises(CheckpointError, match="refused"):
        trainer.strategy.load_checkpoint(ckpt, weights_only=False)  # even when asked to unpickle
    assert not marker.exists()


def test_a_last_ckpt_that_is_no_lightning_checkpoint_is_one_line_on_resume(tiny_cfg, tmp_path, capsys):
    cfg = tiny_cfg("patch8", *TINY)
    paths = RunPaths(Path(cfg.run_dir))
    paths.last_ckpt.parent.mkdir(parents=True)
    torch.save({"state_dict": {"weight": torch.zeros(2)}}, paths.last_ckpt)  # e.g. a final model put in its place
    paths.config.write_text(OmegaConf.to_yaml(cfg, resolve=True))  # an interrupted run of this very recipe
    with pytest.raises(SystemExit) as exit_info:
        reports_user_errors(train_rung)(cfg)  # what train.py runs
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1, err
    assert err == f"error: {paths.last_ckpt}: not a Lightning checkpoint (no epoch); {checkpoint_io.RETRAIN}\n"
    assert not (paths.root / "wandb").exists() and not paths.model.exists() and not paths.done.exists()
    # Whatever else the file holds instead of Lightning's epoch index: the same error.
    for state in ([1, 2], {"epoch": None}, {"epoch": "last"}):
        torch.save(state, tmp_path / "other.ckpt")
        with pytest.raises(CheckpointError, match=r"other\.ckpt: not a Lightning checkpoint \(no epoch\); delete it"):
            checkpoint_epoch(tmp_path / "other.ckpt")


def saved_epochs(tmp_path, monkeypatch, min_interval_s: float, epoch_s: float, stop_after: int | None = None):
    """The epochs (epochs trained) a 7-epoch fit saves last.ckpt after, its epochs taking ``epoch_s`` each."""
    clock = FakeClock(epoch_s)
    monkeypatch.setattr(checkpoint_io, "time", clock)
    saved = []

    class Recording(AtomicCheckpointIO):
        def save_checkpoint(self, checkpoint, path, storage_options=None):
            saved.append(checkpoint["epoch"] + 1)
            super().save_checkpoint(checkpoint, path, storage_options)

    checkpoint = SpacedCheckpoint(tmp_path / "last.ckpt", min_interval_s=min_interval_s)
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=7,
        limit_train_batches=2,
        limit_val_batches=0,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[checkpoint, EpochTakes(clock, stop_after)],
        plugins=[Recording()],
    )
    trainer.fit(BoringModel())
    assert checkpoint_epoch(tmp_path / "last.ckpt") == saved[-1]
    if stop_after is None:  # the schedule the ladder's estimate and the GPU check count
        assert len(saved) == saves_in(7, epoch_s, every_n_epochs=1, min_interval_s=min_interval_s)
    return saved


def test_checkpoints_wait_for_their_interval_and_the_last_epoch_is_always_saved(tmp_path, monkeypatch):
    # Epochs of 25 s, at most one save a minute: after epochs 3 (75 s) and 6 (150 s), and the last, 7.
    assert saved_epochs(tmp_path / "a", monkeypatch, min_interval_s=60, epoch_s=25) == [3, 6, 7]
    assert saved_epochs(tmp_path / "b", monkeypatch, min_interval_s=0, epoch_s=25) == [1, 2, 3, 4, 5, 6, 7]
    assert saved_epochs(tmp_path / "c", monkeypatch, min_interval_s=60, epoch_s=90) == [1, 2, 3, 4, 5, 6, 7]
    # A stop asked for mid-fit (trainer.max_time's timer, early stopping) saves the epoch it ends on.
    assert saved_epochs(tmp_path / "d", monkeypatch, min_interval_s=3600, epoch_s=25, stop_after=2) == [2]


def test_a_run_saves_at_the_configured_interval(tiny_cfg, monkeypatch):
    saves = []
    save = torch.save

    def counting(obj, file, *args, **kwargs):
        if isinstance(obj, dict) and "loops" in obj:  # a Lightning checkpoint
            saves.append(obj["epoch"] + 1)
        return save(obj, file, *args, **kwargs)

    monkeypatch.setattr(torch, "save", counting)
    cfg = tiny_cfg("patch8", "profile.epoch_scale=0.03", "checkpoint.min_interval_s=3600", *TINY)  # 3 epochs
    assert train_rung(cfg)["epochs"] == 3
    assert saves == [3], "within the interval only the last epoch is saved"
    assert compose_rung("epochs200").checkpoint.min_interval_s == 60  # the full profile's (docs/design.md §6)
    assert compose_rung("epochs200", ["profile=smoke"]).checkpoint.min_interval_s == 0


def test_the_count_of_saves_follows_the_interval_and_every_n_epochs():
    assert saves_in(200, 1.1, every_n_epochs=1, min_interval_s=60) == 4  # an H200: after epochs 55, 110, 165, 200
    assert saves_in(200, 1200.0, every_n_epochs=1, min_interval_s=60) == 200  # a CPU: every epoch
    assert saves_in(10, 1.0, every_n_epochs=3, min_interval_s=0) == 3  # epochs 3, 6, 9 (10 is not a 3rd)
    assert saves_in(10, 1.0, every_n_epochs=0, min_interval_s=0) == 0
