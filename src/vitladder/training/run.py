"""Train one rung into its folder: config, checkpoints, metrics CSV, W&B run, completion marker.

A finished rung (done.json) is skipped, an interrupted one resumed from last.ckpt in the same W&B run, both only under
the same recipe, and one process per rung holds the folder's lock (training/recipe.py); on several devices only rank
0 writes, the other ranks train beside it (started_for_another_rank)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

import lightning as L
from lightning.pytorch.strategies import StrategyRegistry
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from omegaconf import DictConfig, OmegaConf

from vitladder.atomic import remove_leftovers
from vitladder.config import scaled_epochs
from vitladder.cuda_choices import fused_adamw, run_choices, use_tensor_cores
from vitladder.data.datamodule import ImageDataModule, per_device_batch
from vitladder.errors import UserError
from vitladder.run_folder import EPOCH, LR, RunPaths, read_summary
from vitladder.training.checkpoint_io import AtomicCheckpointIO, SpacedCheckpoint, checkpoint_epoch
from vitladder.training.metrics_csv import MetricsLogger, prune_metrics
from vitladder.training.module import RecipeModule, TrainingDiverged, mixes
from vitladder.training.recipe import replaces_old_run, run_lock, set_aside, write_recipe
from vitladder.training.results import final_val_acc, rung_summary, write_results
from vitladder.wandb.run import check_wandb_mode, finished_if_failed, make_logger

log = logging.getLogger(__name__)

# The rung's analysis from its config, run folder and data: a callback whose ``scalars`` (None until it has analysed
# the final model) go into done.json. A layer above training: vitladder.pipeline gives the probes' one.
Analysis = Callable[[DictConfig, RunPaths, ImageDataModule], L.Callback]
# The launchers' variables: Lightning's (LOCAL_RANK, NODE_RANK), torchrun's (RANK), SLURM's and LSF's.
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")


class RunInterrupted(UserError):
    exit_code = 130


def started_for_another_rank() -> bool:
    """Whether a launcher started this process for a global rank other than 0: Lightning's DDP launcher runs the
    command again, inside rank 0's first fit, for the others. Read from the environment, so it is known before any
    Trainer exists (Lightning's rank_zero_only.rank misses NODE_RANK until then)."""
    return any(os.environ.get(name, "0") != "0" for name in RANK_VARIABLES)


class MetricAxes(L.Callback):
    """What metrics are plotted against. ``epoch`` = epochs trained (0: the model at initialisation) with every
    epoch-level metric, everywhere (metrics.csv, W&B, tracking.csv), where Lightning would log the index of the epoch
    being run. ``lr`` at the optimizer steps Lightning logs at, as LearningRateMonitor would but under one key: the
    parameter groups (with and without weight decay) share one schedule, not ``lr-AdamW/pg1`` and ``/pg2``."""

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            pl_module.log(EPOCH, float(trainer.current_epoch + 1), rank_zero_only=True)

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == "fit":  # after fitting, trainer.test logs Lightning's epoch: the epochs trained
            self.on_train_epoch_end(trainer, pl_module)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int) -> None:
        every, step = trainer.log_every_n_steps, trainer.global_step
        if every and ((step + 1) % every == 0 or trainer.should_stop):  # + 1: the step about to be taken
            for logger in trainer.loggers:
                logger.log_metrics({LR: trainer.optimizers[0].param_groups[0]["lr"]}, step=step)


def build_module(cfg: DictConfig, data: ImageDataModule) -> RecipeModule:
    """The rung's RecipeModule for the set-up ``data``: its classes, image size, batches and statistics."""
    max_epochs, warmup_epochs = scaled_epochs(cfg)
    use_tensor_cores(run_choices(cfg))
    model = {**OmegaConf.to_container(cfg.model, resolve=True), "num_classes": data.num_classes}
    return RecipeModule(
        model={**model, "img_size": check_patch_size(int(cfg.model.patch_size), data.image_size)},
        optim=OmegaConf.to_container(cfg.optim, resolve=True),
        label_smoothing=float(cfg.loss.label_smoothing),
        mixup=OmegaConf.to_container(cfg.mixup, resolve=True),
        max_epochs=max_epochs,
        warmup_epochs=warmup_epochs,
        steps_per_epoch=data.steps_per_epoch,
        normalization=data.stats.to_dict(),
        compile=bool(cfg.speed.compile),
        fused_adamw=fused_adamw(cfg),
        seed=int(cfg.seed),
    )


def check_patch_size(patch_size: int, image_size: int) -> int:
    """The image size, once model.patch_size is known to divide it (the source sets it, so the config cannot)."""
    if image_size % patch_size:
        divisor = next(d for d in (4, 8, 2, 16, 1) if image_size % d == 0)
        raise UserError(
            f"model.patch_size={patch_size} does not divide the {image_size}x{image_size} images of this data: "
            f"choose a divisor of {image_size}, e.g. model.patch_size={divisor}"
        )
    return image_size


def world_size(cfg: DictConfig) -> int:
    """How many processes the run will train on, read from a trainer that is built and dropped (no process
    starts), so that a batch that does not split over them, or a strategy that would lose the run's state,
    fails before anything is written."""
    placement = {key: cfg.trainer[key] for key in ("accelerator", "devices", "strategy", "num_nodes")}
    quiet = logging.getLogger("lightning.pytorch.utilities.rank_zero")  # its device lines come with the real one
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    try:
        probe = L.Trainer(
            **placement, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
        )
    except MisconfigurationException as error:
        where = " ".join(f"trainer.{key}={value}" for key, value in placement.items())
        raise UserError(f"{where}: {str(error).strip().splitlines()[0]}") from None
    finally:
        quiet.setLevel(level)
    # The spawn and fork launchers (ddp_spawn, ddp_fork, ddp_notebook and variants, XLA's, "auto" in a notebook) fit
    # in processes of their own and hand back the weights only: the rung's epochs, steps and analysis stay there. Their
    # class is private: they are the registry's strategies that do not start by popen, and the launchers a notebook can
    # run (which cannot run the script again). test_multi_device pins which strategies are refused.
    strategy = str(cfg.trainer.strategy)
    start = StrategyRegistry[strategy]["init_params"].get("start_method") if strategy in StrategyRegistry else None
    if start not in (None, "popen") or getattr(probe.strategy.launcher, "is_interactive_compatible", False):
        raise UserError(
            f"trainer.strategy={strategy} trains in processes that keep the run's epochs, steps and "
            "analysis to themselves: use trainer.strategy=ddp (Lightning then runs the command once per device)"
        )
    return probe.world_size


def check_placement(cfg: DictConfig) -> None:
    """Refuses, before anything is written, a placement Lightning rejects, a spawn or fork strategy, or a global
    batch that does not split over the devices (into even batches under MixUp/CutMix)."""
    mixing = mixes(cfg.mixup.mixup_alpha, cfg.mixup.cutmix_alpha)
    per_device_batch(int(cfg.data.batch_size), world_size(cfg), even=mixing)


def build_trainer(cfg: DictConfig, loggers: list, callbacks: list) -> L.Trainer:
    """The `trainer:` block's arguments (config_schema.TrainerConfig) and the run's loggers, callbacks, plugins."""
    arguments = OmegaConf.to_container(cfg.trainer, resolve=True)
    if int(cfg.data.val_size) == 0:  # no validation split: no validation loop (not an empty one Lightning warns of)
        arguments["limit_val_batches"] = 0
    # last.ckpt: written atomically beside the old one, read weights-only
    return L.Trainer(**arguments, logger=loggers, callbacks=callbacks, plugins=[AtomicCheckpointIO()])


def resume_checkpoint(paths: RunPaths) -> str | None:
    """last.ckpt of an interrupted run (metrics.csv cut back to it), or None for a fresh start (no metrics.csv)."""
    if not paths.last_ckpt.exists():
        paths.metrics_csv.unlink(missing_ok=True)  # rows of an attempt killed before its first checkpoint
        return None
    prune_metrics(paths.metrics_csv, from_epoch=checkpoint_epoch(paths.last_ckpt))
    return str(paths.last_ckpt)


def train_rung(cfg: DictConfig, overrides: list[str] | None = None, *, make_analysis: Analysis) -> dict:
    """Trains, tests, analyses (with the callback ``make_analysis`` builds) and saves one rung; returns its summary.
    `overrides`: the command-line overrides that made cfg, kept in the run folder."""
    paths = RunPaths(cfg.run_dir)
    replace = replaces_old_run(cfg)
    if paths.done.exists() and not replace:
        return read_summary(paths.root)
    check_wandb_mode(cfg.wandb.mode)
    started = time.time()
    check_placement(cfg)
    datamodule = ImageDataModule(cfg.data, seed=int(cfg.seed))
    datamodule.prepare_data()  # bad data fails here, before the run folder exists
    datamodule.setup()  # loads nothing again: prepare_data's load is kept for the process
    check_patch_size(int(cfg.model.patch_size), datamodule.image_size)
    if started_for_another_rank():
        # Trains with rank 0 and writes nothing. It resumes as rank 0 does, from the same files: before it trains,
        # rank 0 changes none that this reads, except moving a run of another recipe aside, after which both start
        # afresh. Each rank reads last.ckpt itself (Lightning's resume).
        resume_from = None if replace or not paths.last_ckpt.exists() else str(paths.last_ckpt)
        try:
            return _fit_and_test(cfg, paths, datamodule, started, resume_from, make_analysis)
        except TrainingDiverged:
            # Every rank stops at the same epoch end (the loss is averaged over the ranks) and rank 0 says why,
            # once. Ending quietly keeps Lightning's process watcher from killing rank 0 while it closes W&B.
            raise SystemExit(0) from None
    if replace:
        set_aside(paths)
    with run_lock(paths.root):  # one process per rung, until done.json is written
        # Checked again under the lock: another process may have trained here since the check above.
        if replaces_old_run(cfg):
            raise UserError(f"{paths.root} changed while this run loaded its data: run the same command again")
        if paths.done.exists():  # finished by the process that held the lock a moment ago
            return read_summary(paths.root)
        for leftover in remove_leftovers(paths.root):  # half-written files of a process killed here before
            log.info("removed %s, left by an interrupted write", leftover)
        write_recipe(paths, cfg, overrides)
        return _fit_and_test(cfg, paths, datamodule, started, resume_checkpoint(paths), make_analysis)


def _fit_and_test(
    cfg: DictConfig,
    paths: RunPaths,
    datamodule: ImageDataModule,
    started: float,
    resume_from: str | None,
    make_analysis: Analysis,
) -> dict:
    """Fits (from ``resume_from`` or afresh), tests and analyses the rung on every rank; rank 0 writes the results."""
    L.seed_everything(int(cfg.seed), workers=True, verbose=False)
    module = build_module(cfg, datamodule)
    # last.ckpt, replaced at epoch ends (every N-th, once min_interval_s has passed), after the divergence check
    interval_s, every_n = float(cfg.checkpoint.min_interval_s), int(cfg.checkpoint.every_n_epochs)
    checkpoint = SpacedCheckpoint(paths.last_ckpt, min_interval_s=interval_s, every_n_epochs=every_n)
    analysis = make_analysis(cfg, paths, datamodule)
    with finished_if_failed():
        wandb_logger = None if started_for_another_rank() else make_logger(cfg, paths.root)  # None: W&B disabled
        loggers = [logger for logger in (wandb_logger, MetricsLogger(paths.root)) if logger is not None]
        trainer = build_trainer(cfg, loggers, [checkpoint, analysis, MetricAxes()])
        try:
            trainer.fit(module, datamodule=datamodule, ckpt_path=resume_from, weights_only=True)
            val_acc = final_val_acc(trainer, paths, validated=len(datamodule.val.labels) > 0)
            test_metrics = trainer.test(module, datamodule=datamodule, verbose=False)[0]
        except SystemExit:  # Ctrl-C: Lightning shuts the trainer down, then exits with 1; the rung is not finished
            if not trainer.interrupted:
                raise
            raise RunInterrupted(f"{paths.root}: interrupted; run the same command again to resume") from None
        summary = rung_summary(cfg, trainer, val_acc, test_metrics, analysis.scalars, started, datamodule.facts())
        if trainer.is_global_zero:
            write_results(module, paths, datamodule.classes, cfg, summary, wandb_logger)
    return summary
