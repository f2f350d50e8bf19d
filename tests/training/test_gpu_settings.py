"""What a GPU run does, rehearsed on the CPU: the CUDA choices (cuda_choices.py) train, clipped or not, on a GPU with
bf16 and on one without, and a whole smoke ladder trains, resumes, analyses and reports with them; a compiled model
builds one training graph and one evaluation graph, never recompiles between them, and keeps its analysis hooks; a
compile failure falls back to eager."""

from __future__ import annotations

import csv
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.plugins.precision import MixedPrecision
from omegaconf import OmegaConf
from run_helpers import Crash, CrashAtEpoch, EpochTakes, FakeClock, fit, set_up_data
from tiny_data import tiny_data
from torch._dynamo.utils import counters

from vitladder import cuda_choices
from vitladder.analysis.callback import AttentionAnalysis
from vitladder.config import compose_rung
from vitladder.cuda_choices import CudaChoices
from vitladder.pipeline import train_rung
from vitladder.training import checkpoint_io
from vitladder.training import run as run_module
from vitladder.training.checkpoint_io import checkpoint_epoch, saves_in
from vitladder.training.run import build_module, build_trainer


def record_clipping(monkeypatch) -> list[float]:
    """The clip value Lightning's mixed-precision plugin is given at every step (0: no clipping)."""
    clipped = []
    clip = MixedPrecision.clip_gradients

    def recorded(self, optimizer, clip_val=0.0, gradient_clip_algorithm=None):
        clipped.append(clip_val)
        return clip(self, optimizer, clip_val, gradient_clip_algorithm)

    monkeypatch.setattr(MixedPrecision, "clip_gradients", recorded)
    return clipped


def test_gradient_clipping_trains_under_the_cuda_settings(tiny_cfg, tmp_path, monkeypatch, matmul_precision):
    # bf16-mixed with fused AdamW: Lightning refuses to clip before a fused step ("Are you using a 'fused'
    # optimizer?"), so a clipped run takes the unfused one.
    clipped = record_clipping(monkeypatch)
    cfg = tiny_cfg(
        "patch4",
        "speed.rehearse_cuda=true",
        "trainer.gradient_clip_val=1.0",
        "trainer.max_steps=2",
        "trainer.limit_val_batches=0",
        "trainer.enable_checkpointing=false",
    )
    datamodule = set_up_data(cfg)
    trainer = build_trainer(cfg, loggers=[], callbacks=[])
    trainer.fit(build_module(cfg, datamodule), datamodule=datamodule)
    assert trainer.global_step == 2 and trainer.precision == "bf16-mixed" and clipped == [1.0, 1.0]
    assert not trainer.optimizers[0].defaults["fused"] and torch.get_float32_matmul_precision() == "high"


@pytest.mark.parametrize("clip", [None, 1.0])
def test_a_gpu_without_bf16_trains_with_fp16_autocast_and_a_loss_scaler(tiny_cfg, monkeypatch, matmul_precision, clip):
    gpu = CudaChoices(cuda=True, bf16=False)  # a V100 or a T4
    monkeypatch.setattr(cuda_choices, "cuda_choices", lambda accelerator, rehearse: gpu)  # what run_choices reads
    clipped = record_clipping(monkeypatch)
    cfg = tiny_cfg("patch4", "model.depth=1", "data.batch_size=16", f"trainer.gradient_clip_val={clip or 'null'}")
    module = build_module(cfg, set_up_data(cfg))
    # Lightning turns 16-mixed into bf16-mixed on a CPU; its plugin, given directly, keeps fp16 and the loss scaler.
    assert gpu.precision == "16-mixed"
    plugin = MixedPrecision(gpu.precision, "cpu")
    trainer = fit(cfg, module, plugins=[plugin], max_steps=3, limit_val_batches=0, gradient_clip_val=clip)
    assert trainer.global_step == 3 and trainer.precision_plugin.scaler is plugin.scaler is not None
    assert bool(trainer.optimizers[0].defaults["fused"]) == (clip is None) and clipped == [clip or 0.0] * 3
    assert all(torch.isfinite(p).all() for p in module.parameters())


class GraphCount(L.Callback):
    """Graphs compiled so far, after each epoch's validation."""

    def __init__(self) -> None:
        self.after_epoch: list[int] = []

    def on_validation_epoch_end(self, trainer, module) -> None:
        self.after_epoch.append(counters["stats"]["unique_graphs"])


@pytest.mark.slow
def test_a_compiled_model_builds_one_train_and_one_eval_graph_and_keeps_its_analysis_hooks(
    tiny_cfg, tmp_path, monkeypatch
):
    # Dynamo decides what to (re)compile whatever the backend; "eager" skips inductor's code generation.
    compile_ = torch.nn.Module.compile
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **kwargs: compile_(self, backend="eager"))
    torch._dynamo.reset()
    counters.clear()
    # 2 epochs of 3 steps (MixUp/CutMix, drop path); validation batches of 64, 64 and 22; test 64 x 3 and 8.
    cfg = tiny_cfg(
        "stochastic_depth",
        "speed.compile=true",
        "data.eval_batch_size=64",
        "data.val_size=150",
        "data.train_subset=192",
        "profile.epoch_scale=0.02",
    )
    tracking = AttentionAnalysis(
        tmp_path / "analysis",
        "stochastic_depth",
        patch_px=4,
        num_images=16,
        batch_size=16,
        track_every_n_epochs=1,
        track_images=16,
    )
    graphs = GraphCount()
    datamodule = set_up_data(cfg)
    module, tracking.data = build_module(cfg, datamodule), datamodule
    trainer = build_trainer(cfg, loggers=[], callbacks=[tracking, graphs])
    trainer.fit(module, datamodule=datamodule)
    trainer.test(module, datamodule=datamodule, verbose=False)
    assert counters["stats"]["unique_graphs"] > 0, "speed.compile=true compiles the model"
    # Train, then evaluate at any batch size: two graphs in the first epoch, none after (train <-> eval, test too).
    assert graphs.after_epoch == [2, 2] and counters["stats"]["unique_graphs"] == 2
    # The tracking and the final analysis ran the compiled model eagerly and read its attention through the hooks.
    assert sorted({row["epoch"] for row in tracking.history}) == [0, 1, 2]
    assert tracking.scalars is not None and tracking.scalars["analysis_images"] == 16
    distance = torch.tensor([row["distance_px"] for row in tracking.results["attention"].tables["heads"]])
    assert torch.isfinite(distance).all() and (distance > 0).all()


def test_a_compile_failure_in_training_falls_back_to_eager_with_one_warning_line(
    tiny_cfg, tmp_path, monkeypatch, caplog
):
    # As a GPU without a working Triton or C compiler fails: the backend raises when it is first given a graph.
    calls = []

    def broken(graph, example_inputs):
        calls.append(len(example_inputs))
        raise RuntimeError("no working C compiler for the kernels\nmore detail on a second line")

    compile_ = torch.nn.Module.compile
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **kwargs: compile_(self, backend=broken))
    torch._dynamo.reset()
    cfg = tiny_cfg("patch4", "speed.compile=true", "model.depth=1", "trainer.max_steps=3", "analysis.enabled=false")
    datamodule = set_up_data(cfg)
    module = build_module(cfg, datamodule)
    trainer = build_trainer(cfg, loggers=[], callbacks=[])
    with caplog.at_level("WARNING", logger="vitladder"):
        trainer.fit(module, datamodule=datamodule)
        trainer.test(module, datamodule=datamodule, verbose=False)
    assert trainer.global_step == 3 and module.compile_failed and len(calls) == 1, "tried once, then eager"
    warnings = [r.getMessage() for r in caplog.records if r.name.startswith("vitladder")]
    assert len(warnings) == 1 and "\n" not in warnings[0], warnings
    assert warnings[0] == (  # the first two lines of torch's report: who raised, and what
        "torch.compile failed (backend='broken' raised: RuntimeError: no working C compiler for the kernels): "
        "training on without it (speed.compile=false skips it)"
    )


@pytest.mark.slow
def test_the_cuda_choices_train_resume_analyse_and_report_a_smoke_ladder_on_the_cpu(
    tmp_path, monkeypatch, matmul_precision, wandb_run_reader
):
    from vitladder.report.ladder_report import build_report
    from vitladder.report.report_run import log_report_to_wandb
    from vitladder.training.ladder import PlannedRun, plan_ladder, run_ladder
    from vitladder.training.module import RecipeModule

    # aot_eager: Dynamo and AOTAutograd (the joint forward and backward graph, decompositions) without Inductor's
    # code generation, which on a GPU is Triton's and which a CPU run would not test anyway.
    compile_ = torch.nn.Module.compile
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **kwargs: compile_(self, backend="aot_eager"))
    torch._dynamo.reset()
    counters.clear()
    # What every training step runs under: autocast on the CPU and its dtype, the matmul precision, fused AdamW.
    steps = set()
    training_step = RecipeModule.training_step

    def recorded(self, batch, batch_idx):
        fused = bool(self.trainer.optimizers[0].defaults["fused"])
        autocast = (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"))
        steps.add((*autocast, torch.get_float32_matmul_precision(), fused))
        return training_step(self, batch, batch_idx)

    monkeypatch.setattr(RecipeModule, "training_step", recorded)
    # The full profile's checkpoint interval (60 s) on a clock where an epoch takes 35 s: last.ckpt after an epoch
    # end once 70 s have passed, and after the last epoch.
    interval_s = compose_rung("epochs200").checkpoint.min_interval_s
    clock, saves = FakeClock(epoch_s=35.0), []
    monkeypatch.setattr(checkpoint_io, "time", clock)
    save_checkpoint = checkpoint_io.AtomicCheckpointIO.save_checkpoint

    def recorded_save(io, checkpoint, path, storage_options=None):
        saves.append((Path(path).parent.parent.name, checkpoint["epoch"] + 1))  # (rung, epochs trained)
        save_checkpoint(io, checkpoint, path, storage_options)

    monkeypatch.setattr(checkpoint_io.AtomicCheckpointIO, "save_checkpoint", recorded_save)
    # epochs200 (crop and flip, patch 4, warmup, label smoothing, MixUp/CutMix, drop path; 3 epochs here) crashes
    # at the start of its third epoch, after its first checkpoint; then the same ladder runs again.
    build_trainer_ = run_module.build_trainer
    crashes = [CrashAtEpoch(2)]

    def build_trainer(cfg, loggers, callbacks):
        extra = [crashes.pop()] if cfg.rung == "epochs200" and crashes else []
        return build_trainer_(cfg, loggers, [*callbacks, EpochTakes(clock), *extra])

    monkeypatch.setattr(run_module, "build_trainer", build_trainer)
    overrides = [
        "profile=smoke",
        *tiny_data(num_train=250, num_test=40, val_size=100, batch_size=50),
        "model.depth=2",
        "analysis.num_images=16",
        "analysis.track_images=8",
        "trainer.enable_progress_bar=false",
        f"output_root={tmp_path}",
        f"checkpoint.min_interval_s={interval_s}",
        "speed.rehearse_cuda=true",  # bf16-mixed, fused AdamW, TF32
        "speed.compile=true",
    ]
    patch8, epochs200 = (run for run in plan_ladder([0], overrides) if run.rung in ("patch8", "epochs200"))
    longer = [*epochs200.overrides, "optim.epochs=300"]  # 3 smoke epochs, to space the checkpoints
    runs = [patch8, PlannedRun("epochs200", 0, compose_rung("epochs200", longer[1:]), longer)]
    estimate = lambda cfgs: [1.0] * len(cfgs)  # noqa: E731 - the ladder's time estimate is not this test's
    with pytest.raises(Crash):
        run_ladder(runs, train_rung, estimate, log=lambda line: None)
    top = runs[-1].run_dir
    assert (runs[0].run_dir / "done.json").exists() and not (top / "done.json").exists()
    assert checkpoint_epoch(top / "checkpoints" / "last.ckpt") == 2 and saves == [("patch8", 1), ("epochs200", 2)]
    summaries = run_ladder(runs, train_rung, estimate, log=lambda line: None)
    assert saves[2:] == [("epochs200", 3)], "resumed from epoch 2's checkpoint; the last epoch saved"
    assert saves_in(3, clock.epoch_s, 1, interval_s) == 2, "the schedule the estimate and the GPU check count"
    ladder = top.parent
    build_report(ladder)
    log_report_to_wandb(ladder, mode="offline")

    # Every step took every choice; the model was compiled (and its attention still analysed, eagerly).
    assert steps == {(True, torch.bfloat16, "high", True)}
    assert counters["stats"]["unique_graphs"] > 0
    config = OmegaConf.load(top / "config.yaml")
    assert config.trainer.precision == "bf16-mixed" and config.speed.rehearse_cuda
    # The resumed rung finished its three epochs, each logged once; both rungs were analysed and are in the report.
    assert [s["epochs"] for s in summaries] == [1, 3]
    assert all(s["layer1_distance_px"] > 0 for s in summaries)
    with (top / "metrics.csv").open() as file:
        assert [float(row["epoch"]) for row in csv.DictReader(file) if row.get("val/acc")] == [1.0, 2.0, 3.0]
    with (ladder / "ladder.csv").open() as file:
        assert [row["rung"] for row in csv.DictReader(file)] == ["patch8", "epochs200"]
    assert (ladder / "report.md").is_file() and (ladder / "distance_by_layer.png").is_file()
    (report_run,) = (ladder / "wandb").glob("offline-run-*")
    table = wandb_run_reader(report_run).table("report/ladder")
    rung, acc = (table["columns"].index(key) for key in ("rung", "test_acc"))
    assert [row[rung] for row in table["data"] if row[acc] is not None] == ["patch8", "epochs200"]
