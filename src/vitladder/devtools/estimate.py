"""How long a ladder will take on this machine: a few timed training steps per model shape, and one checkpoint
of that model written where the run's will be, times the saves its checkpoint interval makes; and the configured
probes, timed by the benchmark on a few images of that shape, for the final analysis on ``analysis.num_images``
and the tracking of every tracked epoch."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from vitladder.atomic import save_torch
from vitladder.config import scaled_epochs
from vitladder.cuda_choices import fused_adamw, on_cuda
from vitladder.data.stats import ChannelStats
from vitladder.devtools.benchmark import TRACK, time_probes
from vitladder.devtools.timing import bare_step, time_steps
from vitladder.model import ViTConfig, build_vit
from vitladder.training.checkpoint_io import saves_in

EVAL_COST = 1 / 3  # a forward pass costs about a third of a training step
RUN_OVERHEAD_S = 6.0  # start-up, W&B and the files of one run
PROBE_IMAGES = (2, 8)  # the probes are timed on this many images, then on this many: a fixed and a per-image cost


@dataclass(frozen=True)
class StepCost:
    per_image_s: float  # one training step over its images
    checkpoint_s: float  # one checkpoint of the model and its AdamW state, written and fsynced


@cache
def step_cost(
    vit: ViTConfig, batch_size: int, device: str, folder: str, precision: str = "32-true", fused: bool = False
) -> StepCost:
    """Times a few AdamW steps of the model (on the CPU with at most 64 images, to stay short) in the run's
    ``precision`` and AdamW (``fused`` or not), then one save of its weights and optimizer state (what last.ckpt
    holds) into a temporary folder in ``folder``."""
    model = build_vit(vit).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, **({"fused": True} if fused else {}))
    batch = batch_size if device == "cuda" else min(batch_size, 64)
    images = torch.randn(batch, 3, vit.img_size, vit.img_size, device=device)
    labels = torch.randint(0, vit.num_classes, (batch,), device=device)
    step = bare_step(model, optimizer, torch.nn.functional.cross_entropy, torch.device(device), precision)
    # One warm-up step (allocations, kernel selection), two timed: on the CPU their median is their mean.
    per_image = time_steps(lambda: step(images, labels), warmup=1, steps=2, device=torch.device(device)) / batch
    state = {"state_dict": model.state_dict(), "optimizer_states": [optimizer.state_dict()]}
    with tempfile.TemporaryDirectory(dir=folder, prefix=".estimate-") as tmp:
        checkpoint_s = time_steps(lambda: save_torch(state, Path(tmp) / "last.ckpt"), 0, 1, torch.device(device))
    return StepCost(per_image, checkpoint_s)


@dataclass(frozen=True)
class ProbeCost:
    """Seconds of a probe (or of the tracking) on ``n`` images: ``fixed_s + per_image_s * n``. Its figures cost the
    same for any number of images; its metrics and ablations grow with them."""

    fixed_s: float
    per_image_s: float

    def seconds(self, images: int) -> float:
        return self.fixed_s + self.per_image_s * images


@cache
def probe_costs(vit: ViTConfig, device: str, analysis: str) -> dict[str, ProbeCost]:
    """Each probe of ``analysis`` (the run's probes, settings and batch size, as JSON: a cache key) and
    ``benchmark.TRACK`` (the tracking), timed by the benchmark's ``time_probes`` on the model's shape and device on
    ``PROBE_IMAGES[0]`` random images, then ``PROBE_IMAGES[1]``, then the first number again: the line through the
    shorter of the two few-image times (the first pays the first-call costs, the process's first figures and
    allocations; other work on the machine only adds time) and the many-image time."""
    model = build_vit(vit).to(device)
    cfg = OmegaConf.create(
        {"analysis": json.loads(analysis), "rung": "estimate", "model": {"patch_size": vit.patch_size}}
    )
    images = torch.randint(0, 256, (max(PROBE_IMAGES), 3, vit.img_size, vit.img_size), dtype=torch.uint8)
    labels = torch.randint(0, vit.num_classes, (len(images),))
    images, labels, stats = images.to(device), labels.to(device), ChannelStats((0.5,) * 3, (0.25,) * 3)

    def timed(n: int) -> dict[str, float]:
        return time_probes(model, images[:n], labels[:n], cfg, stats, rounds=1, track=True, warmup=False)[0]

    first, more, again = (timed(n) for n in (PROBE_IMAGES[0], PROBE_IMAGES[1], PROBE_IMAGES[0]))
    few = {name: min(first[name], again[name]) for name in first}
    costs = {}
    for name in few:
        per_image = max(more[name] - few[name], 0.0) / (PROBE_IMAGES[1] - PROBE_IMAGES[0])
        costs[name] = ProbeCost(max(few[name] - per_image * PROBE_IMAGES[0], 0.0), per_image)
    return costs


@dataclass(frozen=True)
class DataShape:
    """What the estimate needs of a run's data: the images each split holds, their side and the classes."""

    num_train: int
    num_val: int
    num_test: int
    image_size: int
    num_classes: int


def estimate_run_seconds(cfg: DictConfig, data: DataShape) -> float:
    device = "cuda" if on_cuda(cfg.trainer.accelerator) else "cpu"
    vit = ViTConfig(
        patch_size=int(cfg.model.patch_size),
        embed_dim=int(cfg.model.embed_dim),
        depth=int(cfg.model.depth),
        num_heads=int(cfg.model.num_heads),
        mlp_ratio=float(cfg.model.mlp_ratio),
        img_size=data.image_size,
        num_classes=data.num_classes,
    )
    folder = str(existing_folder(Path(cfg.run_dir)))
    cost = step_cost(vit, int(cfg.data.batch_size), device, folder, str(cfg.trainer.precision), fused_adamw(cfg))
    epochs, _ = scaled_epochs(cfg)
    epoch_s = (data.num_train + EVAL_COST * data.num_val) * cost.per_image_s
    saves = saves_in(epochs, epoch_s, int(cfg.checkpoint.every_n_epochs), float(cfg.checkpoint.min_interval_s))
    test_s = EVAL_COST * data.num_test * cost.per_image_s
    analysis_s = analysis_seconds(cfg, data, vit, device, epochs)
    return epochs * epoch_s + test_s + saves * cost.checkpoint_s + analysis_s + RUN_OVERHEAD_S


def analysis_seconds(cfg: DictConfig, data: DataShape, vit: ViTConfig, device: str, epochs: int) -> float:
    """The final analysis (each probe on the first ``analysis.num_images`` test images, or fewer where its
    ``images`` setting says so) and the tracking (at the start and every ``track_every_n_epochs``)."""
    analysis = OmegaConf.to_container(cfg.analysis, resolve=True)
    if not analysis["enabled"]:
        return 0.0
    timed = {key: analysis[key] for key in ("probes", "settings", "batch_size")}  # what a probe's cost depends on
    costs = probe_costs(vit, device, json.dumps(timed, sort_keys=True))
    images = min(analysis["num_images"], data.num_test)
    final = sum(
        costs[name].seconds(min(images, analysis["settings"].get(name, {}).get("images") or images))
        for name in analysis["probes"]
    )
    # The callback's tracking images: the first validation images, or training images where none are held out.
    every, tracked = analysis["track_every_n_epochs"], min(analysis["track_images"], data.num_val or data.num_train)
    tracks = 1 + epochs // every if every > 0 and tracked > 0 else 0  # at the start, then every `every` epochs
    return final + tracks * costs[TRACK].seconds(tracked)


def existing_folder(path: Path) -> Path:
    """``path`` or its nearest existing parent: the file system a run folder will be on, before it exists."""
    path = path.absolute()
    while not path.is_dir():
        path = path.parent
    return path


def data_shape(cfg: DictConfig) -> DataShape:
    """The shape of a run's data, loading (or downloading) it: the process keeps it for the runs that follow
    (data.sources.load)."""
    from vitladder.data import sources

    splits = sources.load(cfg.data)
    num_val = int(cfg.data.val_size)
    num_train = len(splits.train_labels) - num_val
    if cfg.data.train_subset:
        num_train = min(num_train, int(cfg.data.train_subset))
    num_test = len(splits.test_labels)
    if cfg.data.test_subset:
        num_test = min(num_test, int(cfg.data.test_subset))
    return DataShape(num_train, num_val, num_test, splits.image_size, splits.num_classes)


def estimate_ladder(cfgs: Sequence[DictConfig]) -> list[float]:
    shapes: dict[str, DataShape] = {}
    estimates = []
    for cfg in cfgs:
        key = str(cfg.data)
        if key not in shapes:
            shapes[key] = data_shape(cfg)
        estimates.append(estimate_run_seconds(cfg, shapes[key]))
    return estimates
