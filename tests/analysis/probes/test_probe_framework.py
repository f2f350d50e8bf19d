"""The probe framework: probes found by name, one-line errors for unknown ones, one maker per output, and every
probe run in eval mode, without gradients, with the images on the model's device."""

from __future__ import annotations

import importlib
import sys

import pytest
import torch
from tiny_data import tiny_data

from vitladder.analysis import probes
from vitladder.analysis.probes import Context, Result, probe_names, run_probes, track_probes
from vitladder.config import compose_rung
from vitladder.data.sources.cifar10 import STATS as CIFAR10_STATS
from vitladder.errors import UserError
from vitladder.model import ViTConfig, build_vit

SPY = '''
"""A probe that records how it was called."""

import torch

from vitladder.analysis.probes import Result

SEEN = []


def run(model, images, labels, ctx):
    SEEN.append(("run", model.training, torch.is_grad_enabled(), images.device, next(model.parameters()).device))
    return Result(scalars={"spy": 1.0})


def track(model, images, ctx):
    SEEN.append(("track", model.training, torch.is_grad_enabled(), images.device, next(model.parameters()).device))
    return {"spy": 2.0}
'''


@pytest.fixture
def spy(tmp_path, monkeypatch):
    """probe "spy" in this process: its module in ``tmp_path``, one more place the probes package looks in."""
    (tmp_path / "spy.py").write_text(SPY)
    monkeypatch.setattr(probes, "__path__", [*probes.__path__, str(tmp_path)])
    yield importlib.import_module("vitladder.analysis.probes.spy")
    sys.modules.pop("vitladder.analysis.probes.spy", None)  # the next test's spy is a fresh module


def ctx() -> Context:
    return Context("patch8", 0, 8, 4, CIFAR10_STATS)


def test_the_shipped_probes_are_the_modules_of_the_package() -> None:
    assert probe_names() == ["attention", "cls_attention", "head_ablation", "positions"]
    assert list(compose_rung("patch8", []).analysis.probes) == [
        "attention",
        "positions",
        "cls_attention",
        "head_ablation",
    ]


def test_an_unknown_probe_is_one_line_before_anything_runs() -> None:
    with pytest.raises(UserError, match="analysis.probes: no probe 'atention': choose from attention, cls_attention"):
        from vitladder.config import validate

        validate(compose_rung("patch8", ["analysis.probes=[atention]"]))
    with pytest.raises(UserError, match="unknown probe 'nope'"):
        probes.probe_named("nope")


def test_probes_run_in_eval_mode_without_gradients_on_the_models_device(spy) -> None:
    model = build_vit(ViTConfig(patch_size=8, embed_dim=24, depth=1)).train()
    images = torch.zeros(2, 3, 32, 32, dtype=torch.uint8)
    with torch.enable_grad():
        assert run_probes(model, images, torch.zeros(2, dtype=torch.long), ctx(), ["spy"])["spy"].scalars == {"spy": 1}
        assert track_probes(model, images, ctx(), ["spy"]) == {"spy": 2.0}
    cpu = torch.device("cpu")
    assert spy.SEEN == [("run", False, False, cpu, cpu), ("track", False, False, cpu, cpu)]
    assert model.training, "the caller's mode is restored"


def test_the_callback_hands_probes_the_training_devices_images_in_eval_mode_without_gradients(spy, tmp_path) -> None:
    # The callback as train_rung builds it, on a tiny fit: the tracking at initialisation and each epoch, and the
    # final analysis, all see the model in eval mode, no gradients, the images where the parameters are.
    from lightning import Trainer

    from vitladder.analysis.callback import AttentionAnalysis
    from vitladder.data.datamodule import ImageDataModule
    from vitladder.training.run import build_module

    cfg = compose_rung("patch8", ["profile=smoke", *tiny_data(num_train=120, num_test=20, val_size=20, batch_size=50)])
    datamodule = ImageDataModule(cfg.data)
    datamodule.setup()
    callback = AttentionAnalysis(tmp_path, "patch8", 8, num_images=4, track_every_n_epochs=1, track_images=4,
                                 data=datamodule, probes=["spy"])  # fmt: skip
    trainer = Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False, callbacks=[callback],
                      enable_progress_bar=False, default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(build_module(cfg, datamodule), datamodule=datamodule)
    device = trainer.strategy.root_device
    assert [s[0] for s in spy.SEEN] == ["track", "track", "run"]
    assert all(s[1:] == (False, False, device, device) for s in spy.SEEN), spy.SEEN
    assert callback.history == [{"epoch": 0, "spy": 2.0}, {"epoch": 1, "spy": 2.0}] and callback.scalars["spy"] == 1


def test_two_probes_making_one_output_are_refused(monkeypatch) -> None:
    class Twin:
        @staticmethod
        def run(model, images, labels, ctx):
            return Result(tables={"heads": []})

    monkeypatch.setattr(probes, "probe_named", lambda name: Twin if name == "twin" else importlib.import_module(
        f"vitladder.analysis.probes.{name}"))  # fmt: skip
    model = build_vit(ViTConfig(patch_size=8, embed_dim=24, depth=1))
    images = torch.zeros(2, 3, 32, 32, dtype=torch.uint8)
    with pytest.raises(ValueError, match="probes attention and twin both make tables 'heads'"):
        run_probes(model, images, torch.zeros(2, dtype=torch.long), ctx(), ["attention", "twin"])
