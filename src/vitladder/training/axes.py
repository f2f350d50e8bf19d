"""What every logged metric is plotted against: epochs trained, or the optimizer step for the learning rate.

``epoch`` means epochs trained everywhere (metrics.csv, W&B, tracking.csv): 0 is the model at
initialisation, 1 the model after the first epoch. Lightning would log the index of the epoch being
run instead (0 after the first epoch), which would put the tracking point at initialisation and the
one after the first epoch on the same x.
"""

from __future__ import annotations

import lightning as L
from lightning.pytorch.callbacks import LearningRateMonitor

from vitladder.run_folder import EPOCH, LR

__all__ = ["EpochsTrained", "LearningRate", "axis_callbacks"]


class EpochsTrained(L.Callback):
    """Logs ``epoch`` = epochs trained with every epoch-level metric (Lightning only sets it when absent)."""

    def _log(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            pl_module.log(EPOCH, float(trainer.current_epoch + 1), rank_zero_only=True)

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == "fit":  # after fitting, trainer.test logs Lightning's epoch: the epochs trained
            self._log(trainer, pl_module)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._log(trainer, pl_module)


class LearningRate(LearningRateMonitor):
    """Lightning's monitor under one name, ``lr``: the optimizer's parameter groups (with and without
    weight decay) share one schedule, and one quantity gets one key, not ``lr-AdamW/pg1`` and ``/pg2``. The monitor
    has no public hook for its keys: ``_extract_stats`` is private, and tests/wandb/test_run.py pins it."""

    def _extract_stats(self, trainer: L.Trainer, interval: str) -> dict[str, float]:
        stats = super()._extract_stats(trainer, interval)
        values = set(stats.values())
        return {LR: values.pop()} if len(values) == 1 else stats


def axis_callbacks() -> list[L.Callback]:
    """The callbacks every rung trains with so that its metrics land on the right axes."""
    return [EpochsTrained(), LearningRate(logging_interval="step")]
