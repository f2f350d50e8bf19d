"""What every logged metric is plotted against: epochs trained, or the optimizer step for the learning rate.

``epoch`` means epochs trained everywhere (metrics.csv, W&B, tracking.csv): 0 is the model at
initialisation, 1 the model after the first epoch. Lightning would log the index of the epoch being
run instead (0 after the first epoch), which would put the tracking point at initialisation and the
one after the first epoch on the same x.
"""

from __future__ import annotations

import lightning as L

from vitladder.run_folder import EPOCH, LR

__all__ = ["EpochsTrained", "LearningRate", "axis_callbacks"]


class EpochsTrained(L.Callback):
    """Logs ``epoch`` = epochs trained with every epoch-level metric (Lightning only sets it when absent)."""

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            pl_module.log(EPOCH, float(trainer.current_epoch + 1), rank_zero_only=True)

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == "fit":  # after fitting, trainer.test logs Lightning's epoch: the epochs trained
            self.on_train_epoch_end(trainer, pl_module)


class LearningRate(L.Callback):
    """``lr`` at the optimizer steps Lightning logs at (every trainer.log_every_n_steps, and a stop), as its
    LearningRateMonitor logs it but under one key: the parameter groups (with and without weight decay) share one
    schedule, so one quantity, not ``lr-AdamW/pg1`` and ``/pg2``."""

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int) -> None:
        every, step = trainer.log_every_n_steps, trainer.global_step
        if every and ((step + 1) % every == 0 or trainer.should_stop):  # + 1: the step about to be taken
            for logger in trainer.loggers:
                logger.log_metrics({LR: trainer.optimizers[0].param_groups[0]["lr"]}, step=step)


def axis_callbacks() -> list[L.Callback]:
    """The callbacks every rung trains with so that its metrics land on the right axes."""
    return [EpochsTrained(), LearningRate()]
