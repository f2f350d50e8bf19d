"""last.ckpt: written at epoch ends spaced in time, atomically (Lightning's fsspec writer moves a file from $TMPDIR,
a truncate-and-copy across file systems, so a full disk would cut last.ckpt short) and read weights-only."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO

from vitladder.atomic import save_torch
from vitladder.errors import CheckpointError
from vitladder.safe_load import load_checkpoint_file

RETRAIN = "delete it to retrain this rung from scratch"


def checkpoint_epoch(ckpt: Path) -> int:
    """Epochs finished when `ckpt` was written; a truncated or foreign file is a clear error."""
    state = load_checkpoint_file(ckpt, RETRAIN)
    try:
        return int(state["epoch"]) + 1  # Lightning stores the index of the epoch that just ended
    except (KeyError, TypeError, ValueError):
        raise CheckpointError(f"{ckpt}: not a Lightning checkpoint (no epoch); {RETRAIN}") from None


class AtomicCheckpointIO(TorchCheckpointIO):
    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        save_torch(checkpoint, path)  # beside the old one, renamed over it once complete and on disk

    def load_checkpoint(self, path: Any, map_location: Any = None, weights_only: bool | None = None) -> dict:
        return load_checkpoint_file(path, RETRAIN)  # weights only whatever the caller asks: anyone can hand one in


class SpacedCheckpoint(ModelCheckpoint):
    """Lightning's epoch-end checkpoint into one file, ``path``, skipped until ``min_interval_s`` seconds have passed
    since the last save (or the start); the fit's last epoch is always saved. Saving costs at most one save per
    ``min_interval_s``, and a kill loses at most that and one epoch (docs/design.md §6). Only at epoch ends: an
    epoch's batches are resumed whole."""

    def __init__(self, path: Path, *, min_interval_s: float = 0.0, every_n_epochs: int = 1) -> None:
        super().__init__(
            dirpath=path.parent,
            filename=path.stem,
            every_n_epochs=every_n_epochs,  # 0: none
            enable_version_counter=False,
            save_on_train_epoch_end=True,
        )
        self.min_interval_s = min_interval_s
        self._last_save = time.monotonic()

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        self._last_save = time.monotonic()  # a resumed run counts from its own start

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        self._last_save = time.monotonic()  # any save of the trainer's state, ours or a caller's

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # The fit's last epoch: max_epochs or max_steps reached, or a stop asked for (trainer.max_time's timer and
        # early stopping set should_stop before the checkpoint callback runs).
        max_epochs, max_steps = trainer.max_epochs, trainer.max_steps
        last = (
            trainer.should_stop
            or (max_epochs is not None and 0 <= max_epochs <= trainer.current_epoch + 1)
            or (max_steps is not None and 0 <= max_steps <= trainer.global_step)
        )
        if last or time.monotonic() - self._last_save >= self.min_interval_s:
            super().on_train_epoch_end(trainer, pl_module)


def saves_in(epochs: int, epoch_s: float, every_n_epochs: int, min_interval_s: float) -> int:
    """How many checkpoints SpacedCheckpoint writes in ``epochs`` epochs of ``epoch_s`` s (the estimate's count)."""
    if every_n_epochs < 1:
        return 0
    saves, since = 0, 0.0
    for epoch in range(1, epochs + 1):
        since += epoch_s
        if epoch % every_n_epochs == 0 and (since >= min_interval_s or epoch == epochs):
            saves, since = saves + 1, 0.0
    return saves
