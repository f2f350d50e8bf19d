"""The ladder's time estimate times its training step with the shared timer: one warm-up step, two timed,
divided by the images of a step (at most 64 on the CPU); and one checkpoint of the model, counted as often as the
run's checkpoint interval saves."""

from __future__ import annotations

import pytest
import torch

from vitladder.config import compose_rung
from vitladder.devtools import estimate
from vitladder.model import ViTConfig, build_vit

TINY_VIT = ViTConfig(patch_size=8, embed_dim=16, depth=1, num_heads=2, mlp_ratio=2.0)


@pytest.fixture(autouse=True)
def fresh_cache():
    estimate.step_cost.cache_clear()  # cached per (shape, batch, device, folder, precision, AdamW) for the ladder
    yield
    estimate.step_cost.cache_clear()


def test_the_step_is_the_shared_timers_step_over_its_images(monkeypatch, tmp_path):
    models, calls = [], []

    def build(vit):
        models.append(build_vit(vit))
        return models[-1]

    def fake_time_steps(step, warmup, steps, device):
        before = [p.detach().clone() for p in models[-1].parameters()]
        step()  # the step it times: a real AdamW step of the model, then a real save
        trained = any(not torch.equal(p, b) for p, b in zip(models[-1].parameters(), before))
        calls.append((warmup, steps, device, trained))
        return 0.64

    monkeypatch.setattr(estimate, "build_vit", build)
    monkeypatch.setattr(estimate, "time_steps", fake_time_steps)
    assert estimate.step_cost(TINY_VIT, 128, "cpu", str(tmp_path)).per_image_s == pytest.approx(0.64 / 64)
    assert estimate.step_cost(TINY_VIT, 16, "cpu", str(tmp_path)).per_image_s == pytest.approx(0.64 / 16)
    cpu = torch.device("cpu")
    assert calls == [(1, 2, cpu, True), (0, 1, cpu, False)] * 2  # the steps, then one checkpoint
    assert list(tmp_path.iterdir()) == [], "the timed checkpoint is removed"


def test_the_step_and_checkpoint_on_the_cpu_are_real_positive_times(tmp_path):
    cost = estimate.step_cost(TINY_VIT, 8, "cpu", str(tmp_path))
    assert 0 < cost.per_image_s < 1 and 0 < cost.checkpoint_s < 5


def test_the_estimate_counts_one_checkpoint_per_save_of_the_interval(monkeypatch, tmp_path):
    cost = estimate.StepCost(per_image_s=1e-3, checkpoint_s=2.0)
    monkeypatch.setattr(estimate, "step_cost", lambda vit, batch, *run: cost)
    shape = estimate.DataShape(num_train=9_000, num_val=3_000, num_test=3_000, image_size=32, num_classes=10)
    base = [f"output_root={tmp_path}", "optim.epochs=10", "trainer.accelerator=cpu"]
    # Epochs of (9,000 + 3,000 / 3) x 1 ms = 10 s; the test pass 1 s.
    run = 10 * 10.0 + 1.0 + estimate.RUN_OVERHEAD_S
    every_epoch = compose_rung("patch8", [*base, "checkpoint.min_interval_s=0"])
    assert estimate.estimate_run_seconds(every_epoch, shape) == pytest.approx(run + 10 * 2.0)
    spaced = compose_rung("patch8", [*base, "checkpoint.min_interval_s=35"])  # after epochs 4 and 8, and 10
    assert estimate.estimate_run_seconds(spaced, shape) == pytest.approx(run + 3 * 2.0)
    none = compose_rung("patch8", [*base, "checkpoint.every_n_epochs=0"])
    assert estimate.estimate_run_seconds(none, shape) == pytest.approx(run)


def test_the_checkpoint_is_timed_on_the_disk_of_the_run_folder_to_be(tmp_path):
    assert estimate.existing_folder(tmp_path / "outputs" / "full" / "warmup") == tmp_path
    assert estimate.existing_folder(tmp_path) == tmp_path


def test_the_estimate_times_the_runs_device_precision_and_adamw(monkeypatch, tmp_path):
    # The run's CUDA choices (cuda_choices.py), not the estimate's own: the device, trainer.precision, fused AdamW.
    timed = []
    monkeypatch.setattr(
        estimate, "step_cost", lambda vit, batch, *run: timed.append(run[:1] + run[2:]) or estimate.StepCost(1e-3, 1.0)
    )
    shape = estimate.DataShape(num_train=100, num_val=10, num_test=10, image_size=32, num_classes=10)

    def times(*overrides: str) -> tuple:
        estimate.estimate_run_seconds(compose_rung("patch8", [f"output_root={tmp_path}", *overrides]), shape)
        return timed.pop()

    rehearsal = ["trainer.accelerator=cpu", "speed.rehearse_cuda=true"]
    assert times(*rehearsal) == ("cpu", "bf16-mixed", True)
    assert times(*rehearsal, "trainer.gradient_clip_val=1.0") == ("cpu", "bf16-mixed", False)
    assert times("trainer.accelerator=cpu") == ("cpu", "32-true", False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU without bf16 (a V100, a T4)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    assert times() == ("cuda", "16-mixed", True)
    assert times("trainer.accelerator=cpu") == ("cpu", "32-true", False)


@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
def test_the_step_is_timed_in_the_runs_precision_with_fused_adamw_on_the_cpu(tmp_path, precision):
    cost = estimate.step_cost(TINY_VIT, 8, "cpu", str(tmp_path), precision, True)
    assert 0 < cost.per_image_s < 1 and 0 < cost.checkpoint_s < 5
