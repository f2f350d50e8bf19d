"""One rung trained and analysed (train.py, scripts/ladder.py, the GPU check): the one module that joins training
and the analysis, which training sits below and so is given here."""

from __future__ import annotations

from omegaconf import DictConfig

from vitladder.analysis.callback import AttentionAnalysis
from vitladder.data.datamodule import ImageDataModule
from vitladder.run_folder import RunPaths
from vitladder.training import run


def rung_analysis(cfg: DictConfig, paths: RunPaths, data: ImageDataModule) -> AttentionAnalysis:
    """The rung's configured probes (the ``analysis:`` block): tracked during training, run after it."""
    patch_px, seed = int(cfg.model.patch_size), int(cfg.seed)
    return AttentionAnalysis.from_config(cfg.analysis, paths.analysis, cfg.rung, patch_px, seed=seed, data=data)


def train_rung(cfg: DictConfig, overrides: list[str] | None = None) -> dict:
    """training.run.train_rung with the rung's analysis: trains, tests, analyses and saves one rung."""
    return run.train_rung(cfg, overrides, make_analysis=rung_analysis)
