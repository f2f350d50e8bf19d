"""A run's final writes (training/results.py), without training: what done.json says, where val_acc
comes from, the order in which model.safetensors, W&B and done.json are written (done.json last: its
presence means finished), and timm building and loading the saved model on its own.

tests/training/test_final_writes.py follows the same writes through a real, resumed run; these are the
fast checks `make mutation` runs against every change to the functions.
"""

from __future__ import annotations

import csv
import errno
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import wandb
from omegaconf import OmegaConf
from run_helpers import saved_file
from safetensors import safe_open
from timm.models import load_checkpoint
from timm.models.vision_transformer import VisionTransformer

from vitladder.analysis.outputs import done_scalars
from vitladder.analysis.probes import Result
from vitladder.analysis.probes.attention import headline
from vitladder.analysis.summary import AttentionSummary
from vitladder.errors import CheckpointError
from vitladder.model import ViTConfig, build_vit
from vitladder.run_folder import MODEL_FORMAT, RunPaths, is_finished, read_summary
from vitladder.training import results as results_module
from vitladder.training.results import epochs_trained, final_val_acc, rung_summary, write_results

MODEL = {"embed_dim": 48, "depth": 7, "num_heads": 6, "mlp_ratio": 4.0}
CFG = OmegaConf.create(
    {
        "rung": "warmup",
        "ladder": "smoke",
        "seed": 3,
        "model": {**MODEL, "patch_size": 4},
        "data": {"source": "synthetic"},
    }
)


def fake_trainer(epochs: int = 4, steps: int = 120, val_acc: float | None = None) -> SimpleNamespace:
    """``steps`` optimizer steps of ``steps / epochs`` a whole epoch, of 5 planned epochs."""
    metrics = {} if val_acc is None else {"val/acc": torch.tensor(val_acc)}
    module = SimpleNamespace(optimizer_steps_per_epoch=lambda: steps // epochs)
    return SimpleNamespace(
        current_epoch=epochs, max_epochs=5, global_step=steps, callback_metrics=metrics, lightning_module=module
    )


def three_layer_summary() -> AttentionSummary:
    heads = {
        # (L, H); layers count from 0, so "layer 1" is the second row
        "distance_px": torch.tensor([[9.0, 9.0], [2.0, 4.0], [10.0, 12.0]]),
        "entropy_nats": torch.tensor([[4.0, 4.0], [1.0, 2.0], [3.0, 3.0]]),
        "cls_share": torch.tensor([[0.5, 0.25], [0.1, 0.1], [0.2, 0.2]]),
        "distance_drop_px": torch.tensor([[4.5, 6.75], [1.8, 3.6], [8.0, 9.6]]),
    }
    uniform = {"distance_px": 11.5, "entropy_nats": 4.1, "distance_drop_px": 10.8}
    return AttentionSummary(heads=heads, uniform=uniform)


def test_the_summary_holds_the_runs_identity_length_accuracies_and_time(monkeypatch):
    monkeypatch.setattr(results_module, "time", SimpleNamespace(time=lambda: 112.34))
    test_metrics = {"test/acc": torch.tensor(0.625), "test/loss": torch.tensor(1.5)}
    data = {"data": "synthetic images", "train_images": 3500, "val_images": 500, "test_images": 500, "test_order": "x"}
    summary = rung_summary(CFG, fake_trainer(epochs=4, steps=120), 0.75, test_metrics, None, 100.0, data)
    assert summary == {
        "rung": "warmup",
        "ladder": "smoke",
        "seed": 3,
        "model": MODEL,  # the report says where it is not the article's (report/setting.py)
        "epochs": 4,
        "epochs_planned": 5,
        "steps": 120,
        "steps_per_epoch": 30,
        **data,
        "test_acc": 0.625,
        "test_loss": 1.5,
        "val_acc": 0.75,
        "seconds": 12.3,
    }
    assert all(type(summary[key]) is float for key in ("test_acc", "test_loss", "val_acc", "seconds"))
    json.dumps(summary)  # tensors would not serialise


def test_a_partial_last_epoch_counts_as_the_fraction_of_its_steps_trained():
    trainer = fake_trainer(epochs=4, steps=120)  # 30 steps an epoch
    trainer.global_step = 100  # trainer.max_time stopped the 4th epoch after 10 of its 30 steps
    summary = rung_summary(CFG, trainer, None, {"test/acc": 0.5, "test/loss": 2.0}, None, started=0.0)
    assert (summary["epochs"], summary["steps"], summary["epochs_planned"]) == (3.33, 100, 5)
    assert epochs_trained(90, 30) == 3 and type(epochs_trained(90, 30)) is int and epochs_trained(1, 3) == 0.33


def test_the_summary_adds_layer_one_of_the_analysis():
    test_metrics = {"test/acc": 0.5, "test/loss": 2.0}
    analysis = done_scalars({"attention": Result(scalars=headline(three_layer_summary()))}, num_images=16)
    summary = rung_summary(CFG, fake_trainer(), 0.5, test_metrics, analysis, started=0.0)
    assert summary["layer1_distance_px"] == pytest.approx(3.0)  # layer 1's head mean
    assert summary["layer1_entropy_nats"] == pytest.approx(1.5)
    assert (summary["uniform_distance_px"], summary["uniform_entropy_nats"]) == (11.5, 4.1)
    assert (summary["layer1_distance_drop_px"], summary["uniform_distance_drop_px"]) == (pytest.approx(2.7), 10.8)
    assert summary["analysis_images"] == 16


def write_metrics_csv(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=["epoch", "step", "train/loss", "val/acc"])
        writer.writeheader()
        writer.writerows(rows)


def test_val_acc_is_this_fits_last_validation_else_the_last_one_logged(tmp_path):
    paths = RunPaths(tmp_path)
    write_metrics_csv(paths.metrics_csv, [{"epoch": 1, "val/acc": 0.4}, {"epoch": 2, "train/loss": 1.0}])
    assert final_val_acc(fake_trainer(val_acc=0.875), paths) == 0.875
    assert type(final_val_acc(fake_trainer(val_acc=0.875), paths)) is float
    # resumed after its last epoch: nothing validated in this process, so the value logged before the resume
    assert final_val_acc(fake_trainer(val_acc=None), paths) == 0.4
    write_metrics_csv(paths.metrics_csv, [{"epoch": 1, "train/loss": 1.0}])
    with pytest.raises(CheckpointError, match="no val/acc logged"):
        final_val_acc(fake_trainer(val_acc=None), paths)


class FakeExperiment:
    def __init__(self, events: list[str]) -> None:
        self.events = events
        self.summary = self

    def update(self, values: dict) -> None:
        self.events.append(f"wandb summary {sorted(values.items())}")

    def finish(self) -> None:
        self.events.append("wandb finish")


@pytest.fixture
def events(monkeypatch, tmp_path) -> list[str]:
    """What write_results does, in order: files made visible (os.replace) and W&B calls."""
    events: list[str] = []
    replace = os.replace

    def recording(src, dst, *args, **kwargs):
        replace(src, dst, *args, **kwargs)
        events.append(Path(dst).relative_to(tmp_path).as_posix())

    monkeypatch.setattr(os, "replace", recording)
    monkeypatch.setattr(results_module, "describe", lambda data_cfg: {**data_cfg})  # no data loaded here
    monkeypatch.setattr(
        results_module,
        "log_rung_artifacts",
        lambda experiment, cfg, dataset, model, analysis, summary: events.append(
            f"artifacts {dataset['source']} {model.name} {summary['rung']}"
        ),
    )
    return events


def tiny_module() -> SimpleNamespace:
    config = ViTConfig(patch_size=8, embed_dim=16, depth=1, num_heads=2, num_classes=3)
    normalization = {"mean": [0.1, 0.2, 0.3], "std": [0.4, 0.5, 0.6]}  # the data's, as RecipeModule holds them
    return SimpleNamespace(vit_config=config, model=build_vit(config), hparams={"normalization": normalization})


SUMMARY = {"rung": "warmup", "val_acc": 0.5, "test_acc": 0.25}


def test_the_model_then_wandb_then_done_json_last(tmp_path, events):
    paths, module = RunPaths(tmp_path), tiny_module()
    logger = SimpleNamespace(experiment=FakeExperiment(events))
    write_results(module, paths, ("cat", "dog", "emu"), CFG, SUMMARY, logger)
    assert events == [
        "checkpoints/model.safetensors",
        "wandb summary [('test/acc', 0.25), ('val/acc', 0.5)]",
        "artifacts synthetic model.safetensors warmup",
        "wandb finish",
        "done.json",
    ]
    assert is_finished(tmp_path) and read_summary(tmp_path) == SUMMARY
    saved = saved_file(tmp_path)
    assert (saved["format"], saved["rung"], saved["ladder"], saved["classes"]) == (
        MODEL_FORMAT,
        "warmup",
        "smoke",
        ["cat", "dog", "emu"],
    )
    assert ViTConfig(**saved["vit_config"]) == module.vit_config
    assert saved["normalization"] == module.hparams["normalization"]  # what the analysis and demo normalise with
    state = module.model.state_dict()
    assert saved["state_dict"].keys() == state.keys()
    assert all(torch.equal(saved["state_dict"][key], value) for key, value in state.items())


def test_wandb_failing_at_the_end_is_one_warning_and_the_rung_still_finishes(tmp_path, events, monkeypatch):
    def refused(*args) -> None:
        raise wandb.errors.CommError("artifact upload refused")

    monkeypatch.setattr(results_module, "log_rung_artifacts", refused)
    logger = SimpleNamespace(experiment=FakeExperiment(events))
    with pytest.warns(UserWarning) as caught:
        write_results(tiny_module(), RunPaths(tmp_path), ("a", "b", "c"), CFG, SUMMARY, logger)
    assert [str(warning.message) for warning in caught] == [
        "W&B could not log the rung's final summary and artifacts (CommError: artifact upload refused): "
        f"the rung is finished and saved in {tmp_path} (scripts/analyze.py logs its analysis again)"
    ]
    assert events == [
        "checkpoints/model.safetensors",
        "wandb summary [('test/acc', 0.25), ('val/acc', 0.5)]",
        "done.json",
    ]
    assert read_summary(tmp_path) == SUMMARY


def test_without_wandb_the_model_then_done_json(tmp_path, events):
    write_results(tiny_module(), RunPaths(tmp_path), ("a", "b", "c"), CFG, SUMMARY, None)
    assert events == ["checkpoints/model.safetensors", "done.json"]


def test_timm_builds_the_saved_model_and_loads_its_weights(tmp_path):
    module = tiny_module()
    write_results(module, RunPaths(tmp_path), ("a", "b", "c"), CFG, SUMMARY, None)
    with safe_open(RunPaths(tmp_path).model, framework="pt") as file:
        header = {key: json.loads(value) for key, value in file.metadata().items()}
    assert header["classes"] == ["a", "b", "c"] and header["rung"] == "warmup"
    timm_vit = VisionTransformer(**header["vit_config"]).eval()  # timm's own constructor and loader, nothing of ours
    load_checkpoint(timm_vit, str(RunPaths(tmp_path).model))
    images = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.allclose(timm_vit(images), module.model.eval()(images), rtol=0, atol=1e-6)


def test_a_model_that_cannot_be_written_leaves_the_rung_unfinished(tmp_path, events, monkeypatch):
    replace = os.replace

    def full_disk(src, dst, *args, **kwargs):
        if Path(dst).name == "model.safetensors":
            raise OSError(errno.ENOSPC, "No space left on device")
        replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(OSError, match="No space left"):
        write_results(tiny_module(), RunPaths(tmp_path), ("a", "b", "c"), CFG, SUMMARY, None)
    assert not is_finished(tmp_path) and not RunPaths(tmp_path).done.exists()
