"""A rung's final writes: the model, the W&B summary and artifacts, and done.json last, so that its presence means
every other output is complete. W&B failing there is one warning: the model and its analysis are saved before it."""

from __future__ import annotations

import time

import lightning as L
from omegaconf import DictConfig

from vitladder.atomic import save_safetensors, write_json
from vitladder.data.sources import describe
from vitladder.errors import CheckpointError
from vitladder.run_folder import MODEL_FORMAT, RunPaths
from vitladder.training.metrics_csv import read_rows
from vitladder.training.module import RecipeModule
from vitladder.wandb.artifacts import log_rung_artifacts
from vitladder.wandb.run import wandb_failure_warns


def final_val_acc(trainer: L.Trainer, paths: RunPaths, validated: bool = True) -> float | None:
    """The last validation accuracy (None without a validation split); metrics.csv's if a run resumed after its last
    epoch validated nothing this time."""
    if not validated:
        return None
    if (val_acc := trainer.callback_metrics.get("val/acc")) is not None:
        return float(val_acc)
    logged = [row["val/acc"] for row in read_rows(paths.metrics_csv)[1] if row.get("val/acc")]
    if not logged:
        raise CheckpointError(f"{paths.metrics_csv}: no val/acc logged; delete the run folder to retrain this rung")
    return float(logged[-1])


def epochs_trained(steps: int, steps_per_epoch: int) -> int | float:
    """Epochs trained, in optimizer steps: a fraction when trainer.max_time stopped the last one part way."""
    whole, rest = divmod(steps, steps_per_epoch)
    return whole if rest == 0 else round(steps / steps_per_epoch, 2)


def rung_summary(
    cfg: DictConfig,
    trainer: L.Trainer,
    val_acc: float | None,
    test_metrics: dict,
    analysis: dict | None,
    started: float,
    data: dict | None = None,
) -> dict:
    """done.json: the rung, its model, what it trained (``data``: ImageDataModule.facts()), its accuracies and the
    probes' scalars."""
    steps, per_epoch = trainer.global_step, trainer.lightning_module.optimizer_steps_per_epoch()
    return {
        "rung": cfg.rung,
        "ladder": cfg.ladder,
        "seed": int(cfg.seed),
        "model": {key: cfg.model[key] for key in ("embed_dim", "depth", "num_heads", "mlp_ratio")},
        "epochs": epochs_trained(steps, per_epoch),
        "epochs_planned": trainer.max_epochs,
        "steps": steps,
        "steps_per_epoch": per_epoch,
        **(data or {}),
        "test_acc": float(test_metrics["test/acc"]),
        "test_loss": float(test_metrics["test/loss"]),
        "val_acc": val_acc,
        "seconds": round(time.time() - started, 1),
        **(analysis or {}),
    }


def save_model(module: RecipeModule, paths: RunPaths, classes: tuple[str, ...], cfg: DictConfig) -> None:
    """model.safetensors: the weights, and in its header all that rebuilds (vit_config: VisionTransformer's
    arguments), names and normalises for them (the analysis and the demo)."""
    header = {"format": MODEL_FORMAT, "vit_config": module.vit_config.to_dict(), "classes": list(classes)}
    header |= {"normalization": module.hparams["normalization"], "rung": cfg.rung, "ladder": cfg.ladder}
    save_safetensors({k: v.detach().cpu() for k, v in module.model.state_dict().items()}, header, paths.model)


def write_results(
    module: RecipeModule, paths: RunPaths, classes: tuple[str, ...], cfg: DictConfig, summary: dict, wandb_logger
) -> None:
    save_model(module, paths, classes, cfg)
    if wandb_logger is not None:
        kept = f"the rung is finished and saved in {paths.root} (scripts/analyze.py logs its analysis again)"
        with wandb_failure_warns("the rung's final summary and artifacts", kept):
            run = wandb_logger.experiment
            accuracies = {"val/acc": summary["val_acc"], "test/acc": summary["test_acc"]}
            run.summary.update({k: v for k, v in accuracies.items() if v is not None})
            log_rung_artifacts(run, cfg, describe(cfg.data), paths.model, paths.analysis, summary)
            run.finish()
    write_json(paths.done, summary)
