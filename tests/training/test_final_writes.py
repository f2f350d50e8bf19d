"""The order of a run's final writes: done.json marks a rung finished, so it must come last.

Every output is written to a temporary name and renamed (vitladder.atomic); the order of those
renames is the order in which files become visible. One rung lives through what a real one can:
killed during its last epoch, resumed, the disk filling up while model.safetensors is written (a crash
between the model and done.json must leave the rung unfinished), run again to the end, and run once
more (skipped). Along the way: the run's seed drives every random stream, and its folder holds the
resolved config, each epoch's metrics once and one last.ckpt.
"""

from __future__ import annotations

import csv
import errno
import json
import os
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from omegaconf import OmegaConf
from run_helpers import Crash, CrashAtEpoch, saved_file

import vitladder.data.datamodule as datamodule_module
from vitladder.analysis.probes import columns
from vitladder.config import compose_rung
from vitladder.data.device_batches import DeviceBatches
from vitladder.model import ViTConfig, build_vit
from vitladder.pipeline import train_rung
from vitladder.run_folder import RunPaths, is_finished, read_summary
from vitladder.training import results as results_module
from vitladder.training import run as run_module
from vitladder.training.checkpoint_io import checkpoint_epoch

REPLACE = os.replace


@pytest.fixture
def cfg(tiny_cfg, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")  # a real (offline) W&B run: its summary must match done.json
    return tiny_cfg(
        "patch8",
        "seed=1",
        "profile.epoch_scale=0.02",
        "model.depth=2",
        "data.num_train=300",
        "data.val_size=60",
        "data.num_test=40",
        "analysis.num_images=8",
        "analysis.track_every_n_epochs=0",
    )


def record_renames(monkeypatch, root: Path, fail_on: str | None = None) -> list[str]:
    """Names (relative to the run folder) that os.replace makes visible, in order; optionally a full disk
    for one of them."""
    renames: list[str] = []

    def recording(src, dst, *args, **kwargs):
        dst = Path(dst)
        if fail_on is not None and dst.name == fail_on:
            raise OSError(errno.ENOSPC, "No space left on device")
        REPLACE(src, dst, *args, **kwargs)
        if dst.is_relative_to(root):
            renames.append(dst.relative_to(root).as_posix())

    monkeypatch.setattr(os, "replace", recording)
    return renames


def record_seeds(monkeypatch) -> tuple[list, list]:
    """The seeds given to the global RNGs and to the datamodule's batches."""
    global_seeds, batch_seeds = [], []
    seed_everything = L.seed_everything

    class RecordingBatches(DeviceBatches):
        def __init__(self, *args, **kwargs) -> None:
            batch_seeds.append(kwargs["seed"])
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(
        L, "seed_everything", lambda seed, **kw: global_seeds.append(seed) or seed_everything(seed, **kw)
    )
    monkeypatch.setattr(datamodule_module, "DeviceBatches", RecordingBatches)
    return global_seeds, batch_seeds


def logged_epochs(metrics_csv: Path, key: str) -> list[str]:
    with metrics_csv.open() as file:
        return sorted(float(row["epoch"]) for row in csv.DictReader(file) if row.get(key))


def test_done_json_comes_last_and_after_the_model_also_after_a_crash_between_them(
    cfg, monkeypatch, wandb_run_reader
) -> None:
    paths = RunPaths(Path(cfg.run_dir))
    global_seeds, batch_seeds = record_seeds(monkeypatch)

    build_trainer = run_module.build_trainer
    monkeypatch.setattr(
        run_module,
        "build_trainer",
        lambda cfg, loggers, callbacks: build_trainer(cfg, loggers, [*callbacks, CrashAtEpoch(1)]),
    )
    with pytest.raises(Crash):
        train_rung(cfg)
    assert checkpoint_epoch(paths.last_ckpt) == 1 and not is_finished(paths.root)
    monkeypatch.setattr(run_module, "build_trainer", build_trainer)

    record_renames(monkeypatch, paths.root, fail_on="model.safetensors")
    with pytest.raises(OSError, match="No space left"):
        train_rung(cfg)  # resumes, trains epoch 1, tests and analyses; then saving the model fails
    assert not paths.model.exists()
    assert not paths.done.exists() and not is_finished(paths.root), "a rung whose model was never saved is finished"
    checkpoints = sorted(p.name for p in paths.checkpoints.iterdir() if not p.name.startswith("."))
    assert checkpoints == ["last.ckpt"] and checkpoint_epoch(paths.last_ckpt) == 2  # replaced, not versioned

    half_written = paths.analysis / ".layers.csv.dead1234.tmp"  # as a writer killed mid-write leaves it
    half_written.parent.mkdir(exist_ok=True)
    half_written.write_text("layer,distance")
    renames = record_renames(monkeypatch, paths.root)
    monkeypatch.setattr(run_module, "time", SimpleNamespace(time=lambda: 100.0))  # started
    monkeypatch.setattr(results_module, "time", SimpleNamespace(time=lambda: 112.34))  # summarised
    summary = train_rung(cfg)  # resumes from last.ckpt: nothing left to train; tests, analyses and saves
    assert renames[-1] == "done.json" and renames.count("done.json") == 1, renames
    assert not half_written.exists(), "a killed writer's temporary file outlived the run"
    assert "checkpoints/model.safetensors" in renames
    assert {"analysis/heads.csv", "analysis/layers.csv"} <= set(renames)
    assert global_seeds == [1, 1, 1] and batch_seeds and set(batch_seeds) == {1}  # the run's seed drives its numbers

    # what the final files hold: the trained weights, and the summary of this very run
    saved = saved_file(paths.root)
    last = torch.load(paths.last_ckpt, map_location="cpu", weights_only=True)["state_dict"]
    model = build_vit(ViTConfig(**saved["vit_config"]))
    model.load_state_dict(saved["state_dict"])
    assert all(torch.equal(value, last[f"model.{key}"]) for key, value in saved["state_dict"].items())
    assert (saved["format"], saved["rung"], saved["ladder"]) == ("vitladder-model/1", "patch8", "smoke")
    assert len(saved["classes"]) == 10 and saved["vit_config"]["depth"] == 2
    assert json.loads(paths.done.read_text()) == summary
    assert set(summary) == {
        "rung",
        "ladder",
        "seed",
        "model",
        "epochs",
        "epochs_planned",
        "steps",
        "steps_per_epoch",
        "data",
        "train_images",
        "val_images",
        "test_images",
        "test_order",
        "test_acc",
        "test_loss",
        "val_acc",
        "seconds",
        "analysis_images",
        *(column.key for column in columns(compose_rung("patch8", []).analysis.probes)),  # each probe's numbers
    }
    assert (summary["rung"], summary["ladder"], summary["seed"], summary["epochs"]) == ("patch8", "smoke", 1, 2)
    assert summary["seconds"] == 12.3 and summary["analysis_images"] == 8
    # What it trained, counted over the interruptions: 2 epochs of 240 // 64 = 3 steps, on which images.
    trained = {k: summary[k] for k in ("epochs_planned", "steps", "steps_per_epoch", "train_images", "val_images")}
    assert trained == {"epochs_planned": 2, "steps": 6, "steps_per_epoch": 3, "train_images": 240, "val_images": 60}
    assert (summary["data"], summary["test_images"], summary["test_order"]) == ("synthetic images", 40, "seeded")
    rows = list(csv.DictReader(paths.metrics_csv.open()))
    assert summary["val_acc"] == float([r for r in rows if r.get("val/acc")][-1]["val/acc"])  # the last epoch's
    test_row = [r for r in rows if r.get("test/acc")][-1]
    assert (summary["test_acc"], summary["test_loss"]) == (float(test_row["test/acc"]), float(test_row["test/loss"]))
    layer1 = [r for r in csv.DictReader((paths.analysis / "layers.csv").open()) if r["layer"] == "1"][0]
    assert summary["layer1_distance_px"] == float(layer1["distance_px"])
    assert summary["layer1_entropy_nats"] == float(layer1["entropy_nats"])
    # the W&B run's summary, as written in its newest (the resumed) offline run folder
    newest = max(paths.root.glob("wandb/offline-run-*"), key=lambda folder: folder.name)
    wandb_summary = wandb_run_reader(newest).summary
    assert (wandb_summary["val/acc"], wandb_summary["test/acc"]) == (summary["val_acc"], summary["test_acc"])
    # config.yaml is the resolved config; metrics.csv holds each epoch once, though the run was resumed twice
    assert "${" not in paths.config.read_text()
    assert OmegaConf.to_container(OmegaConf.load(paths.config)) == OmegaConf.to_container(cfg, resolve=True)
    for key in ("train/loss", "train/acc", "val/loss", "val/acc"):
        assert logged_epochs(paths.metrics_csv, key) == [1.0, 2.0], key  # epoch: epochs trained
    lr_steps = [row["step"] for row in csv.DictReader(paths.metrics_csv.open()) if row.get("lr")]
    assert lr_steps and len(set(lr_steps)) == len(lr_steps)  # each logged step once

    renames.clear()
    assert is_finished(paths.root) and read_summary(paths.root) == summary
    assert train_rung(cfg) == summary and renames == []  # a finished rung is skipped untouched
