"""A tiny real fit with the AttentionAnalysis callback, shared by the callback and analyze.py tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import lightning as L
import pytest
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, WandbLogger
from omegaconf import DictConfig, OmegaConf
from tiny_data import tiny_data

from vitladder.analysis.callback import AttentionAnalysis
from vitladder.config import compose_rung, scaled_epochs
from vitladder.data.datamodule import ImageDataModule

TINY_DATA = tiny_data(num_train=600, num_test=120, val_size=100, batch_size=100)
TINY_ANALYSIS = [
    "analysis.num_images=40",
    "analysis.batch_size=16",
    "analysis.example_image=3",
    "analysis.track_every_n_epochs=1",
    "analysis.track_images=8",
]


def tiny_overrides(root: Path) -> list[str]:
    """The smoke profile on a tiny synthetic set; 2 epochs; outputs under ``root``."""
    return [
        "profile=smoke",
        *TINY_DATA,
        *TINY_ANALYSIS,
        "profile.epoch_scale=0.02",
        f"output_root={root}",
        "trainer.enable_progress_bar=false",
    ]


@dataclass
class FittedRun:
    cfg: DictConfig
    run_dir: Path
    callback: AttentionAnalysis
    trainer: L.Trainer
    datamodule: ImageDataModule
    overrides: list[str]


def fit(
    cfg: DictConfig,
    callback: AttentionAnalysis,
    wandb_dir: Path | None,
    ckpt_path: str | None = None,
    max_epochs: int | None = None,
) -> tuple[L.Trainer, ImageDataModule]:
    """What train_rung does, with our callback and an offline W&B logger when ``wandb_dir`` is given."""
    from vitladder.training.run import MetricAxes, build_module
    from vitladder.wandb.run import define_metrics, start_run

    run_dir = Path(cfg.run_dir)
    datamodule = ImageDataModule(cfg.data, seed=int(cfg.seed))
    datamodule.setup()
    module = build_module(cfg, datamodule)
    callback.data = datamodule  # as train_rung gives it
    loggers = [CSVLogger(save_dir=str(run_dir), name="", version="")]
    if wandb_dir is not None:
        run = start_run("offline", project="vitladder-tests", dir=str(wandb_dir))
        define_metrics(run)
        loggers.append(WandbLogger(experiment=run, save_dir=str(wandb_dir)))
    trainer = L.Trainer(
        max_epochs=max_epochs or scaled_epochs(cfg)[0],
        accelerator="cpu",
        devices=1,
        logger=loggers,
        callbacks=[
            callback,
            ModelCheckpoint(
                dirpath=str(run_dir / "checkpoints"), save_last=True, save_top_k=0, save_on_train_epoch_end=True
            ),
            MetricAxes(),
        ],
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        log_every_n_steps=1,
        default_root_dir=str(run_dir),
    )
    trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
    if wandb_dir is not None:
        loggers[1].experiment.finish()
    return trainer, datamodule


@pytest.fixture
def fit_fn():
    """``fit`` for tests that train more (test modules cannot import this conftest)."""
    return fit


@pytest.fixture(scope="session")
def fitted_run(tmp_path_factory) -> FittedRun:
    """A 2-epoch patch4 run in a run folder laid out like train_rung's (config.yaml, model.pt, last.ckpt)."""
    from vitladder.run_folder import RunPaths
    from vitladder.training.results import save_model

    root = tmp_path_factory.mktemp("fitted")
    overrides = tiny_overrides(root)
    cfg = compose_rung("patch4", overrides)
    paths = RunPaths(Path(cfg.run_dir))
    paths.root.mkdir(parents=True)
    paths.config.write_text(OmegaConf.to_yaml(cfg, resolve=True))
    callback = AttentionAnalysis.from_config(
        cfg.analysis, out_dir=paths.root / "analysis", rung=cfg.rung, patch_px=cfg.model.patch_size
    )
    trainer, datamodule = fit(cfg, callback, wandb_dir=paths.root)
    save_model(trainer.lightning_module, paths, datamodule.classes, cfg)
    return FittedRun(cfg, paths.root, callback, trainer, datamodule, overrides)
