"""One rung trained and analysed: what train.py, scripts/ladder.py and the GPU check run. The one module that
joins training and the analysis: training sits below the analysis and imports nothing of it, so the analysis
is given to it from here."""

from __future__ import annotations

from omegaconf import DictConfig

from vitladder.analysis.callback import AttentionAnalysis
from vitladder.data.datamodule import ImageDataModule
from vitladder.run_folder import RunPaths
from vitladder.training import run


def rung_analysis(cfg: DictConfig, paths: RunPaths, data: ImageDataModule) -> AttentionAnalysis:
    """The rung's configured probes (the ``analysis:`` block): tracked during training, run after it."""
    return AttentionAnalysis.from_config(
        cfg.analysis,
        out_dir=paths.analysis,
        rung=cfg.rung,
        patch_px=int(cfg.model.patch_size),
        seed=int(cfg.seed),
        data=data,
    )


def train_rung(cfg: DictConfig, overrides: list[str] | None = None) -> dict:
    """training.run.train_rung with the rung's analysis: trains, tests, analyses and saves one rung."""
    return run.train_rung(cfg, overrides, make_analysis=rung_analysis)
