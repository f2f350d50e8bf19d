"""The LightningModule: a timm ViT trained with AdamW, a timm cosine schedule, label smoothing and MixUp/CutMix."""

from __future__ import annotations

import logging
import math
import random

import lightning as L
import numpy as np
import torch
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy
from timm.optim import create_optimizer_v2
from timm.scheduler import CosineLRScheduler
from torch import nn
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from vitladder.data.device_batches import stream_seed
from vitladder.errors import UserError
from vitladder.model import ViTConfig, build_vit

log = logging.getLogger(__name__)


class TrainingDiverged(UserError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


def seed_epoch(seed: int, rank: int, epoch: int) -> None:
    """Seeds the global RNG streams (MixUp/CutMix: numpy; drop path: torch) from ``(seed, rank, epoch)`` at every
    training epoch's start, so a run resumed at an epoch boundary draws what an uninterrupted one draws."""
    value = stream_seed(seed, rank, epoch, "global")
    torch.manual_seed(value)  # every device's generator too
    np.random.seed(value % 2**32)
    random.seed(value)


def mixes(mixup_alpha: float, cutmix_alpha: float) -> bool:
    return mixup_alpha > 0 or cutmix_alpha > 0


class RecipeModule(L.LightningModule):
    """One rung's ViT with its recipe, built by ``training.run.build_module``."""

    def __init__(
        self,
        model: dict,
        optim: dict,
        label_smoothing: float,
        mixup: dict,
        max_epochs: int,
        warmup_epochs: float,
        steps_per_epoch: int,
        normalization: dict | None = None,
        compile: bool = False,
        fused_adamw: bool = False,  # cuda_choices.py: on CUDA unless gradients are clipped
        seed: int = 0,
    ) -> None:
        super().__init__()
        # The arguments, named, in the checkpoint (analysis/checkpoint.py rebuilds the ViT from "model"), not in the
        # loggers: W&B's config is the resolved Hydra config (vitladder.wandb.run.make_logger).
        recipe = {"model": model, "optim": optim, "label_smoothing": label_smoothing, "mixup": mixup}
        schedule = {"max_epochs": max_epochs, "warmup_epochs": warmup_epochs, "steps_per_epoch": steps_per_epoch}
        run = {"normalization": normalization, "compile": compile, "fused_adamw": fused_adamw, "seed": seed}
        self.save_hyperparameters(recipe | schedule | run, logger=False)
        self.compile_failed = False  # set by a failed compile: this process then runs the model eagerly
        self.vit_config = ViTConfig(**model)
        self.model = build_vit(self.vit_config)
        num_classes = self.vit_config.num_classes
        if mixes(mixup["mixup_alpha"], mixup["cutmix_alpha"]):
            # timm's Mixup, one draw per batch on the batch's device: its soft targets carry the label smoothing.
            self.mixup = Mixup(**mixup, mode="batch", label_smoothing=label_smoothing, num_classes=num_classes)
            self.train_criterion = SoftTargetCrossEntropy()
        else:
            self.mixup, self.train_criterion = None, nn.CrossEntropyLoss(label_smoothing=label_smoothing)
        self.eval_criterion = nn.CrossEntropyLoss(reduction="none")  # per image: the mean over images is exact
        # Metrics accumulate on the device and are read once per epoch: no host sync per step. MeanMetric's
        # default NaN check reads the device at every update; with nan_strategy="disable" a NaN also reaches
        # the divergence check instead of being dropped from the mean.
        self.train_loss, self.val_loss, self.test_loss = (MeanMetric(nan_strategy="disable") for _ in range(3))
        self.train_acc, self.val_acc, self.test_acc = (
            MulticlassAccuracy(num_classes, average="micro") for _ in range(3)
        )

    def configure_model(self) -> None:
        if self.hparams.compile:
            # In-place compile keeps the state_dict keys free of `_orig_mod.`. The analysis hooks still
            # work: analyse() runs the model eagerly (torch.compiler.set_stance("force_eager")).
            self.model.compile()

    def on_train_epoch_start(self) -> None:
        seed_epoch(int(self.hparams.seed), self.global_rank, self.current_epoch)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if self.compile_failed:
            with torch.compiler.set_stance("force_eager"):
                return self.model(images)  # (B, num_classes)
        # TorchDynamoException: what torch.compile raises for its own failures (Inductor, Triton, a C compiler) at
        # the first training or evaluation graph. No public name; test_gpu_settings forces one.
        try:
            return self.model(images)
        except torch._dynamo.exc.TorchDynamoException as error:
            if not self.hparams.compile:
                raise
            # A compile failure costs the speed-up, not the run: one warning line, then this process runs eagerly.
            self.compile_failed = True
            if self.global_rank == 0:
                cause = " ".join(line.strip() for line in str(error).strip().splitlines()[:2])
                log.warning("torch.compile failed (%s): training on without it (speed.compile=false skips it)", cause)
            return self.forward(images)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        images, labels = batch  # (B, 3, S, S) float, (B,) int64
        targets = labels
        if self.mixup is not None:
            images, targets = self.mixup(images, labels)  # targets: (B, num_classes) soft
        logits = self(images)
        loss = self.train_criterion(logits, targets)
        self.train_loss.update(loss.detach())
        # Under MixUp/CutMix the image is a blend: train/acc scores the dominant class of its mixed target.
        self.train_acc.update(logits.detach(), targets.argmax(dim=-1) if targets.ndim == 2 else labels)
        return loss

    def on_train_epoch_end(self) -> None:
        loss = self.train_loss.compute()
        # One host sync per epoch: stop before a diverged model overwrites the last good checkpoint.
        if not math.isfinite(loss.item()):
            raise TrainingDiverged(
                f"training loss became {loss.item()} in epoch {self.current_epoch}: lower optim.lr "
                "or add warmup; the last good checkpoint is kept"
            )
        self.log("train/loss", loss, sync_dist=True)
        self.log("train/acc", self.train_acc.compute(), sync_dist=True)
        self.train_loss.reset()
        self.train_acc.reset()

    def _evaluate(self, batch: tuple[torch.Tensor, torch.Tensor], stage: str) -> None:
        images, labels = batch
        # A compiled model then builds one eval graph for any batch size (the last batch is smaller), not a static
        # one first and a dynamic one at the first partial batch.
        torch._dynamo.maybe_mark_dynamic(images, 0)
        logits = self(images)
        loss, acc = getattr(self, f"{stage}_loss"), getattr(self, f"{stage}_acc")
        # One loss per image, no weight: a Python weight would be copied to the device at every step (and
        # MeanMetric's nan_strategy="disable" ignores weights).
        loss.update(self.eval_criterion(logits, labels))  # (B,)
        acc.update(logits, labels)
        # Lightning's defaults here: the metric objects are computed and logged once per epoch.
        self.log(f"{stage}/loss", loss)
        self.log(f"{stage}/acc", acc)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def configure_optimizers(self):
        optim, steps_per_epoch = self.hparams.optim, self.optimizer_steps_per_epoch()
        # timm's factory keeps weight decay off biases, norms, the CLS token and position embeddings.
        optimizer = create_optimizer_v2(
            self.model,
            opt="adamw",
            lr=optim["lr"],
            weight_decay=optim["weight_decay"],
            betas=tuple(optim["betas"]),
            **({"fused": True} if self.hparams.fused_adamw else {}),
        )
        warmup_steps = round(self.hparams.warmup_epochs * steps_per_epoch)
        scheduler = CosineLRScheduler(
            optimizer,
            # Step k trains at the schedule's value for k (0-based): the cosine reaches min_lr on the last step.
            t_initial=max(1, steps_per_epoch * self.hparams.max_epochs - warmup_steps - 1),
            lr_min=optim["min_lr"],
            warmup_t=warmup_steps,
            warmup_lr_init=optim["warmup_start_lr"],
            warmup_prefix=True,  # warmup first, then the full cosine
            t_in_epochs=False,
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def optimizer_steps_per_epoch(self) -> int:
        """What the schedule is sized by, and what done.json counts epochs in."""
        # Given by the data, not trainer.estimated_stepping_batches: that starts iterating the training data
        # before a checkpoint is restored, so a resumed run's first epoch would replay epoch 0's batches.
        batches, limit = int(self.hparams.steps_per_epoch), self.trainer.limit_train_batches
        batches = min(batches, limit) if isinstance(limit, int) else int(batches * limit)
        # Lightning also steps on an epoch's last batch when it ends an accumulation early: round up.
        return max(1, -(-batches // self.trainer.accumulate_grad_batches))

    def lr_scheduler_step(self, scheduler: CosineLRScheduler, metric=None) -> None:
        scheduler.step_update(num_updates=self.global_step)  # timm's schedulers count updates, not epochs
