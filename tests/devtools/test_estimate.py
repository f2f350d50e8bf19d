"""The ladder's time estimate times its training step with the shared timer: one warm-up step, two timed,
divided by the images of a step (at most 64 on the CPU)."""

from __future__ import annotations

import pytest
import torch

from vitladder.devtools import estimate
from vitladder.model import ViTConfig, build_vit

TINY_VIT = ViTConfig(patch_size=8, embed_dim=16, depth=1, num_heads=2, mlp_ratio=2.0)


@pytest.fixture(autouse=True)
def fresh_cache():
    estimate.seconds_per_image.cache_clear()  # cached per (shape, batch, device) for the whole ladder
    yield
    estimate.seconds_per_image.cache_clear()


def test_seconds_per_image_is_the_shared_timers_step_over_its_images(monkeypatch):
    models, calls = [], []

    def build(vit):
        models.append(build_vit(vit))
        return models[-1]

    def fake_time_steps(step, warmup, steps, device):
        before = [p.detach().clone() for p in models[-1].parameters()]
        step()  # the step it times: a real AdamW step of the model
        trained = any(not torch.equal(p, b) for p, b in zip(models[-1].parameters(), before))
        calls.append((warmup, steps, device, trained))
        return 0.64

    monkeypatch.setattr(estimate, "build_vit", build)
    monkeypatch.setattr(estimate, "time_steps", fake_time_steps)
    assert estimate.seconds_per_image(TINY_VIT, 128, "cpu") == pytest.approx(0.64 / 64)  # the CPU times 64 images
    assert estimate.seconds_per_image(TINY_VIT, 16, "cpu") == pytest.approx(0.64 / 16)
    assert calls == [(1, 2, torch.device("cpu"), True)] * 2


def test_seconds_per_image_on_the_cpu_is_a_real_positive_time():
    assert 0 < estimate.seconds_per_image(TINY_VIT, 8, "cpu") < 1
