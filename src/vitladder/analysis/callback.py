"""The Lightning callback that measures attention during and after training.

- During training (every ``track_every_n_epochs`` epochs, and once at initialisation): the per-layer
  values of the metrics shown in figures (``metrics.declared("figures")``: distance and entropy) over the
  first ``track_images`` validation images (training images when ``data.val_size`` is 0), logged as
  ``track/layer{l}/<name>`` against ``epoch`` (epochs trained, 0 = initialisation) and kept as a history
  that travels in the checkpoint, so a resumed run keeps it.
- After training, on the training device: the full analysis of the final model over the first ``num_images`` test
  images, written to ``out_dir`` (CSVs + PNGs, see ``outputs.write_analysis``) and logged to
  W&B (run summary, tables, charts: ``wandb_log.log_analysis``) when a ``WandbLogger`` is among the
  trainer's loggers.
All of it runs on global rank zero only, in eval mode, and leaves the model's mode as it was.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities import rank_zero_info
from torch import nn

from vitladder.analysis.metrics import declared
from vitladder.analysis.outputs import tracking_row, write_analysis
from vitladder.analysis.summary import AttentionSummary, analyse
from vitladder.analysis.wandb_log import log_analysis
from vitladder.data.datamodule import ImageDataModule, Split
from vitladder.training.axes import EPOCH

__all__ = ["AttentionAnalysis", "track_key"]


def _network(pl_module: L.LightningModule) -> nn.Module:
    """The ViT inside the LightningModule (``RecipeModule.model``), or the module itself."""
    return getattr(pl_module, "model", pl_module)


def track_key(layer: int, quantity: str) -> str:
    """The logged name of a tracked metric (its name: distance_px, entropy_nats, ...) of one layer."""
    return f"track/layer{layer}/{quantity}"


class AttentionAnalysis(L.Callback):
    def __init__(
        self,
        out_dir: str | Path,
        rung: str,
        patch_px: int,
        num_images: int = 1000,
        batch_size: int = 250,
        example_image: int = 0,
        track_every_n_epochs: int = 5,
        track_images: int = 64,
        enabled: bool = True,
        seed: int = 0,
        data: ImageDataModule | None = None,
    ) -> None:
        self.out_dir = Path(out_dir)
        self.data = data  # the run's set-up datamodule: its validation and test images, classes and statistics
        self.rung = rung
        self.patch_px = int(patch_px)
        self.num_images = int(num_images)
        self.batch_size = int(batch_size)
        self.example_image = int(example_image)
        self.track_every_n_epochs = int(track_every_n_epochs)
        self.track_images = int(track_images)
        self.enabled = bool(enabled)
        self.seed = int(seed)  # names the run in the W&B tables
        self.history: list[dict] = []  # rows in outputs.tracking_columns(): epoch (epochs trained), layer, metrics
        self.summary: AttentionSummary | None = None  # the final analysis, after fit
        self.files: dict[str, Path] = {}
        self.seconds: float | None = None  # how long the final analysis took

    @classmethod
    def from_config(
        cls,
        analysis_cfg: Mapping[str, Any],
        out_dir: Path,
        rung: str,
        patch_px: int,
        seed: int = 0,
        data: ImageDataModule | None = None,
    ) -> AttentionAnalysis:
        """From the ``analysis:`` block of the Hydra config."""
        keys = ("num_images", "batch_size", "example_image", "track_every_n_epochs", "track_images", "enabled")
        return cls(
            out_dir=out_dir,
            rung=rung,
            patch_px=patch_px,
            seed=seed,
            data=data,
            **{k: analysis_cfg[k] for k in keys if k in analysis_cfg},
        )

    # --- checkpointed state ---------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"history": [dict(r) for r in self.history]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.history = [tracking_row(r) for r in state_dict.get("history", [])]  # older checkpoints: older keys

    # --- tracking during training ---------------------------------------------------------
    def _tracking(self) -> bool:
        return self.enabled and self.track_every_n_epochs > 0 and self.track_images > 0

    def tracking_split(self) -> Split:
        """The validation images; with no validation split (data.val_size=0), the training images, whose first
        ones are a fixed seeded sample (split_train_val_test) seen without augmentation."""
        return self.data.val if len(self.data.val.labels) else self.data.train

    def _track(self, trainer: L.Trainer, pl_module: L.LightningModule, epochs_trained: int) -> dict[str, float]:
        """Measures the tracking batch, keeps the rows in the history; returns {track key: value}."""
        images = self.tracking_split().images[: self.track_images]  # (n, 3, H, W) uint8 on the device
        summary = analyse(
            _network(pl_module), images, self.batch_size, self.patch_px, example_index=None, stats=self.data.stats
        )
        self.history = [r for r in self.history if r["epoch"] != epochs_trained]  # a re-run epoch replaces its rows
        layers = summary.layers
        values = {m.name: layers[m.name].tolist() for m in declared("figures")}  # name -> one value per layer
        metrics = {}
        for layer in range(summary.num_layers):
            row = {name: per_layer[layer] for name, per_layer in values.items()}
            self.history.append({"epoch": epochs_trained, "layer": layer, **row})
            metrics.update({track_key(layer, name): value for name, value in row.items()})
        return metrics

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # The starting point of the history, epoch 0. Lightning's self.log is not allowed in this hook,
        # so it goes to the loggers directly (a resumed run has it already, in its history and its logs).
        if self._tracking() and trainer.is_global_zero and trainer.current_epoch == 0 and not self.history:
            metrics = self._track(trainer, pl_module, epochs_trained=0)
            for logger in trainer.loggers:
                logger.log_metrics({EPOCH: 0, **metrics}, step=trainer.global_step)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        epochs_trained = trainer.current_epoch + 1
        if self._tracking() and trainer.is_global_zero and epochs_trained % self.track_every_n_epochs == 0:
            for key, value in self._track(trainer, pl_module, epochs_trained).items():
                pl_module.log(key, value, rank_zero_only=True)

    # --- the final analysis ---------------------------------------------------------------
    def _final_due(self, trainer: L.Trainer) -> bool:
        return self.enabled and trainer.is_global_zero and self.summary is None

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Here the model is still on the training device: Lightning's teardown moves it to the CPU next,
        # before on_fit_end (on_train_end -> LightningModule.cpu() -> on_fit_end).
        if self._final_due(trainer):
            self._analyse_final(trainer, pl_module)

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # A run resumed after its last epoch trains nothing, and Lightning skips on_train_end: the model goes
        # back to the training device for its analysis, then where the teardown left it.
        if self._final_due(trainer):
            pl_module.to(trainer.strategy.root_device)
            try:
                self._analyse_final(trainer, pl_module)
            finally:
                pl_module.cpu()

    def _analyse_final(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        started = time.perf_counter()
        test = self.data.test
        n = min(self.num_images, len(test.images))
        self.summary = analyse(
            _network(pl_module),
            test.images[:n],
            self.batch_size,
            self.patch_px,
            labels=test.labels[:n],
            example_index=min(self.example_image, n - 1),
            stats=self.data.stats,
        )
        self.files = write_analysis(self.summary, self.out_dir, self.rung, self.data.classes, self.history)
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                log_analysis(logger.experiment, self.summary, self.files, self.rung, self.seed)
        self.seconds = time.perf_counter() - started
        rank_zero_info(f"attention analysis of {n} test images written to {self.out_dir} in {self.seconds:.1f} s")
