"""Train one rung into its folder: config, checkpoints, metrics CSV, W&B run, completion marker."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from omegaconf import DictConfig, OmegaConf

from vitladder.analysis.callback import AttentionAnalysis
from vitladder.analysis.outputs import analysis_summary_for_done
from vitladder.atomic import atomic_path, write_json, write_text
from vitladder.config import scaled_epochs
from vitladder.data.datamodule import ImageDataModule
from vitladder.training.module import LadderModule
from vitladder.training.wandb_run import make_logger

DONE_FILE = "done.json"  # written last, atomically: its presence means the rung is finished
MODEL_FILE = "model.pt"  # the final model, loadable without Lightning
MODEL_FORMAT = "vitladder-model/1"


@dataclass(frozen=True)
class RunPaths:
    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def last_ckpt(self) -> Path:
        return self.checkpoints / "last.ckpt"

    @property
    def model(self) -> Path:
        return self.checkpoints / MODEL_FILE

    @property
    def metrics_csv(self) -> Path:
        return self.root / "metrics.csv"

    @property
    def analysis(self) -> Path:
        return self.root / "analysis"

    @property
    def done(self) -> Path:
        return self.root / DONE_FILE


def is_finished(run_dir: str | Path) -> bool:
    return RunPaths(Path(run_dir)).done.exists()


def read_summary(run_dir: str | Path) -> dict:
    return json.loads(RunPaths(Path(run_dir)).done.read_text())


def resolve_precision(requested: str) -> str:
    if requested != "auto":
        return requested
    return "bf16-mixed" if torch.cuda.is_available() else "32-true"


def build_module(cfg: DictConfig, num_classes: int) -> LadderModule:
    max_epochs, warmup_epochs = scaled_epochs(cfg)
    return LadderModule(
        model={**OmegaConf.to_container(cfg.model, resolve=True), "num_classes": num_classes},
        optim=OmegaConf.to_container(cfg.optim, resolve=True),
        label_smoothing=float(cfg.loss.label_smoothing),
        mixup=OmegaConf.to_container(cfg.mixup, resolve=True),
        max_epochs=max_epochs,
        warmup_epochs=warmup_epochs,
        compile=bool(cfg.trainer.compile),
    )


def save_model(module: LadderModule, paths: RunPaths, classes: tuple[str, ...], cfg: DictConfig) -> None:
    with atomic_path(paths.model) as tmp:
        torch.save(
            {
                "format": MODEL_FORMAT,
                "vit_config": module.vit_config.to_dict(),
                "state_dict": {k: v.detach().cpu() for k, v in module.model.state_dict().items()},
                "classes": list(classes),
                "rung": cfg.rung,
                "ladder": cfg.ladder,
            },
            tmp,
        )


def train_rung(cfg: DictConfig) -> dict:
    """Trains, tests and saves one rung; returns its summary. A finished rung is skipped untouched."""
    paths = RunPaths(Path(cfg.run_dir))
    if paths.done.exists():
        return read_summary(paths.root)
    paths.root.mkdir(parents=True, exist_ok=True)
    write_text(paths.config, OmegaConf.to_yaml(cfg, resolve=True))
    started = time.time()

    L.seed_everything(int(cfg.seed), workers=True, verbose=False)
    datamodule = ImageDataModule(cfg.data, seed=int(cfg.seed))
    datamodule.prepare_data()
    datamodule.setup()
    module = build_module(cfg, num_classes=len(datamodule.classes))
    wandb_logger = make_logger(cfg, paths.root)
    csv_logger = CSVLogger(save_dir=str(paths.root), name="", version="", flush_logs_every_n_steps=1)
    checkpoint = ModelCheckpoint(
        dirpath=str(paths.checkpoints), save_last=True, save_top_k=0, save_on_train_epoch_end=True
    )
    analysis = AttentionAnalysis.from_config(
        cfg.analysis, out_dir=paths.analysis, rung=cfg.rung, patch_px=int(cfg.model.patch_size)
    )
    max_epochs, _ = scaled_epochs(cfg)
    trainer = L.Trainer(
        max_epochs=max_epochs,
        accelerator=cfg.trainer.accelerator,
        devices=cfg.trainer.devices,
        strategy=cfg.trainer.strategy,
        max_time=cfg.trainer.max_time,
        precision=resolve_precision(cfg.trainer.precision),
        logger=[wandb_logger, csv_logger],
        callbacks=[checkpoint, analysis],
        default_root_dir=str(paths.root),
        enable_progress_bar=bool(cfg.trainer.progress_bar),
        enable_model_summary=False,
        log_every_n_steps=int(cfg.trainer.log_every_n_steps),
        num_sanity_val_steps=0,
    )
    resume_from = str(paths.last_ckpt) if paths.last_ckpt.exists() else None
    trainer.fit(module, datamodule=datamodule, ckpt_path=resume_from)
    val_acc = float(trainer.callback_metrics["val/acc"])
    test_metrics = trainer.test(module, datamodule=datamodule, verbose=False)[0]

    summary = {
        "rung": cfg.rung,
        "ladder": cfg.ladder,
        "seed": int(cfg.seed),
        "epochs": trainer.current_epoch,
        "test_acc": float(test_metrics["test/acc"]),
        "test_loss": float(test_metrics["test/loss"]),
        "val_acc": val_acc,
        "seconds": round(time.time() - started, 1),
    }
    if analysis.summary is not None:
        summary.update(analysis_summary_for_done(analysis.summary))
    if trainer.is_global_zero:
        save_model(module, paths, datamodule.classes, cfg)
        wandb_logger.experiment.summary.update({"val/acc": summary["val_acc"], "test/acc": summary["test_acc"]})
        wandb_logger.experiment.finish()
        write_json(paths.done, summary)
    return summary
