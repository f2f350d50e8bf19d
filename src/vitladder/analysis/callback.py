"""The Lightning callback that runs the configured probes (``analysis.probes``), on global rank zero only, in eval
mode: each probe's ``track`` at initialisation and every ``track_every_n_epochs`` epochs (``track/<name>`` against
``epoch``, kept in a history that travels in the checkpoint); after training, on the training device, every probe's
``run`` on the first ``num_images`` test images, written to ``out_dir`` and logged to a ``WandbLogger``, if any.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities import rank_zero_info
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn

from vitladder.analysis.outputs import done_scalars, history_rows, write_results
from vitladder.analysis.probes import Context, Result, run_probes, track_probes
from vitladder.data.datamodule import ImageDataModule
from vitladder.data.stats import ChannelStats
from vitladder.run_folder import EPOCH, TRACK
from vitladder.wandb.analysis import log_analysis


@dataclass(eq=False)  # a callback is itself, whatever its settings
class AttentionAnalysis(L.Callback):
    out_dir: Path
    rung: str
    patch_px: int
    num_images: int = 1000
    batch_size: int = 250
    example_image: int = 0
    track_every_n_epochs: int = 5
    track_images: int = 64
    enabled: bool = True
    seed: int = 0  # names the run in the W&B tables
    data: ImageDataModule | None = None  # the run's set-up datamodule: its images, classes and statistics
    probes: Sequence[str] = ("attention", "cls_attention")
    settings: Mapping[str, Mapping] = field(default_factory=dict)  # probe name -> its analysis.settings block
    history: list[dict] = field(default_factory=list, init=False)  # {"epoch": epochs trained, name: value}
    results: dict[str, Result] | None = field(default=None, init=False)  # the final analysis, after fit
    scalars: dict | None = field(default=None, init=False)  # done.json's analysis numbers, after fit
    files: dict[str, Path] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.out_dir, self.probes, self.settings = Path(self.out_dir), tuple(self.probes), dict(self.settings or {})

    @classmethod
    def from_config(
        cls,
        cfg: DictConfig,
        out_dir: Path,
        rung: str,
        patch_px: int,
        seed: int = 0,
        data: ImageDataModule | None = None,
    ) -> AttentionAnalysis:
        """From the ``analysis:`` block of the Hydra config (config_schema.AnalysisConfig): every key an argument."""
        return cls(out_dir, rung, patch_px, seed=seed, data=data, **OmegaConf.to_container(cfg, resolve=True))

    def context(self, image_size: int, stats: ChannelStats, classes: Sequence[str] | None) -> Context:
        """What the probes are told besides the model and the images."""
        return Context(
            rung=self.rung,
            seed=self.seed,
            patch_px=self.patch_px,
            grid=image_size // self.patch_px,
            stats=stats,
            classes=tuple(classes) if classes else None,
            batch_size=self.batch_size,
            example_index=self.example_image,
            history=tuple(self.history),
            settings=self.settings,
        )

    def analyse(
        self, model: nn.Module, images: Tensor, labels: Tensor, stats: ChannelStats, classes: Sequence[str] | None
    ) -> None:
        """Every probe on ``images`` ``(N, 3, S, S)`` uint8 with ``labels``, written to ``out_dir`` (scripts/analyze.py
        calls this too): sets ``results``, ``files`` and ``scalars``."""
        ctx = self.context(images.shape[-1], stats, classes)
        self.results = run_probes(model, images, labels, ctx, self.probes)
        self.files = write_results(self.results, self.out_dir)
        self.scalars = done_scalars(self.results, len(images))

    def state_dict(self) -> dict[str, Any]:
        return {"history": [dict(r) for r in self.history]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.history = history_rows(state_dict.get("history", []))  # older checkpoints: one row per layer

    def _tracking(self) -> bool:
        return self.enabled and self.track_every_n_epochs > 0 and self.track_images > 0

    def _track(self, trainer: L.Trainer, pl_module: L.LightningModule, epochs_trained: int) -> dict[str, float]:
        """Measures the tracking batch, keeps the values in the history; returns {track/<name>: value}."""
        # The validation images; without them (data.val_size=0), the training images (a fixed seeded sample).
        split = self.data.val if len(self.data.val.labels) else self.data.train
        images = split.images[: self.track_images]  # (n, 3, H, W) uint8 on the device
        ctx = self.context(images.shape[-1], self.data.stats, self.data.classes)
        values = track_probes(pl_module.model, images, ctx, self.probes)  # the ViT (RecipeModule.model)
        self.history = [r for r in self.history if r["epoch"] != epochs_trained]  # a re-run epoch replaces its row
        self.history.append({"epoch": epochs_trained, **values})
        return {f"{TRACK}{name}": value for name, value in values.items()}

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

    def _final_due(self, trainer: L.Trainer) -> bool:
        return self.enabled and trainer.is_global_zero and self.results is None

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
        self.analyse(pl_module.model, test.images[:n], test.labels[:n], self.data.stats, self.data.classes)
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                log_analysis(logger.experiment, self)
        seconds = time.perf_counter() - started
        rank_zero_info(
            f"analysis of {n} test images ({', '.join(self.probes)}) written to {self.out_dir} in {seconds:.1f} s"
        )
