"""Helpers shared by the tests that train: a bare Trainer fit on tiny data, a finished run's model and splits, a crash
at an epoch's start and a fake clock for the checkpoint interval.

Importable from any test (``pythonpath = ["tests"]`` in pyproject.toml), so each idea is written once.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch
from omegaconf import OmegaConf
from torch import nn

from vitladder import config  # noqa: F401  # importing it registers the resolvers config.yaml uses
from vitladder.data import sources
from vitladder.data.augment import normalize
from vitladder.data.datamodule import ImageDataModule, split_train_val_test
from vitladder.data.stats import ChannelStats
from vitladder.model import ViTConfig, build_vit
from vitladder.run_folder import RunPaths
from vitladder.safe_load import load_checkpoint_file


def fit(cfg, module: L.LightningModule, callbacks=(), **trainer_kwargs) -> L.Trainer:
    """Fit ``module`` on ``cfg``'s data with a quiet CPU Trainer (no logger unless given, no checkpoints or sanity
    steps)."""
    quiet = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False}
    quiet |= {"enable_model_summary": False, "num_sanity_val_steps": 0}
    trainer = L.Trainer(accelerator="cpu", callbacks=list(callbacks), **(quiet | trainer_kwargs))
    trainer.fit(module, datamodule=ImageDataModule(cfg.data, seed=int(cfg.seed)))
    return trainer


def set_up_data(cfg) -> ImageDataModule:
    """``cfg``'s datamodule, set up on the CPU (its source loaded once per process)."""
    datamodule = ImageDataModule(cfg.data, seed=int(cfg.seed))
    datamodule.setup()
    return datamodule


def module_for(cfg):
    """The run's RecipeModule for ``cfg``, sized by its data (classes, image size, steps, statistics)."""
    from vitladder.training.run import build_module

    return build_module(cfg, set_up_data(cfg))


def saved_file(run_dir: Path) -> dict:
    """A finished run's model.safetensors: its header's entries and its ``state_dict``."""
    return load_checkpoint_file(RunPaths(run_dir).model, "")


def saved_model(run_dir: Path) -> nn.Module:
    """A finished run's model.safetensors as a ViT in eval mode."""
    saved = saved_file(run_dir)
    model = build_vit(ViTConfig(**saved["vit_config"])).eval()
    model.load_state_dict(saved["state_dict"])
    return model


def saved_inputs(run_dir: Path, images_u8: torch.Tensor) -> torch.Tensor:
    """``images_u8`` normalised as the finished run's model says its model was trained."""
    stats = ChannelStats.from_dict(saved_file(run_dir)["normalization"])
    return normalize(images_u8, stats.mean, stats.std)  # (N, 3, S, S) float


def run_splits(run_dir: Path):
    """(train, val, test) splits of a run, rebuilt in this process from its config.yaml."""
    cfg = OmegaConf.load(RunPaths(run_dir).config)
    data = cfg.data
    return split_train_val_test(
        sources.load(data), int(data.val_size), int(data.split_seed), data.train_subset, data.test_subset
    )


class FakeClock:
    """``time`` for the checkpoint callback (``monkeypatch.setattr(checkpoint_io, "time", clock)``): only
    ``EpochTakes`` moves it, by ``epoch_s`` seconds a training epoch."""

    def __init__(self, epoch_s: float):
        self.now, self.epoch_s = 0.0, epoch_s

    def monotonic(self) -> float:
        return self.now


class EpochTakes(L.Callback):
    """Each training epoch takes the clock's ``epoch_s``; ``stop_after`` epochs, a stop is asked for, as
    trainer.max_time's timer asks."""

    def __init__(self, clock: FakeClock, stop_after: int | None = None):
        self.clock, self.stop_after = clock, stop_after

    def on_train_epoch_end(self, trainer, pl_module):  # runs before the checkpoint callback (Lightning's order)
        self.clock.now += self.clock.epoch_s
        if trainer.current_epoch + 1 == self.stop_after:
            trainer.should_stop = True


class Crash(RuntimeError):
    """What CrashAtEpoch raises: a run killed there."""


class CrashAtEpoch(L.Callback):
    """Raises Crash at the start of training epoch ``epoch`` (0-based), after the checkpoints of the epochs before."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch == self.epoch:
            raise Crash(f"simulated crash at the start of epoch {self.epoch}")
