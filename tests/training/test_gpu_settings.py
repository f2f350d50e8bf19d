"""What a GPU needs, tested on the CPU where it can be: fused AdamW reaching timm's optimizer, and a compiled model that
builds one training graph and one evaluation graph, never recompiles between them, and keeps its analysis hooks."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from run_helpers import set_up_data
from torch._dynamo.utils import counters

from vitladder.analysis.callback import AttentionAnalysis
from vitladder.run_folder import RunPaths
from vitladder.training.run import build_module, build_trainer


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
    trainer = build_trainer(cfg, RunPaths(tmp_path / "run"), loggers=[], callbacks=[tracking, graphs])
    trainer.fit(module, datamodule=datamodule)
    trainer.test(module, datamodule=datamodule, verbose=False)
    assert counters["stats"]["unique_graphs"] > 0, "speed.compile=true compiles the model"
    # Train, then evaluate at any batch size: two graphs in the first epoch, none after (train <-> eval, test too).
    assert graphs.after_epoch == [2, 2] and counters["stats"]["unique_graphs"] == 2
    # The tracking and the final analysis ran the compiled model eagerly and read its attention through the hooks.
    assert sorted({row["epoch"] for row in tracking.history}) == [0, 1, 2]
    summary = tracking.summary
    assert summary is not None and summary.num_images == 16
    assert torch.isfinite(summary.heads["distance_px"]).all() and (summary.heads["distance_px"] > 0).all()
