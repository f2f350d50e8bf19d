"""How long a ladder will take on this machine, before anything trains (scripts/ladder.py). Per model shape, a few
timed training steps and one checkpoint written where the run's will go, counted by the run's epochs and checkpoint
interval (docs/design.md §6); the configured probes and their tracking, counted by the images and epochs the run
analyses (docs/design.md §4)."""

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
from vitladder.data.augment import normalize
from vitladder.data.datamodule import ImageDataModule
from vitladder.data.stats import ChannelStats
from vitladder.devtools.benchmark import TRACK, bare_step, seconds_per_call, time_probes
from vitladder.model import ViTConfig, build_vit
from vitladder.training.checkpoint_io import saves_in

EVAL_COST = 1 / 3  # a forward pass costs about a third of a training step
RUN_OVERHEAD_S = 6.0  # start-up, W&B and the files of one run
PROBE_IMAGES = (2, 16)  # a probe is timed on this many images, then this many: a fixed and a per-image cost


@dataclass(frozen=True)
class StepCost:
    per_image_s: float  # one training step over its images
    checkpoint_s: float  # one checkpoint of the model and its AdamW state, written and fsynced


@cache
def step_cost(vit: ViTConfig, batch_size: int, device: str, folder: str, precision: str, fused: bool) -> StepCost:
    """One warm-up and two timed AdamW steps of the model in the run's precision and AdamW, then one save of what
    last.ckpt holds (weights and AdamW state) into a temporary folder in ``folder``."""
    model = build_vit(vit).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, **({"fused": True} if fused else {}))
    batch = batch_size if device == "cuda" else min(batch_size, 64)  # on the CPU, few images to stay short
    images = torch.randn(batch, 3, vit.img_size, vit.img_size, device=device)
    labels = torch.randint(0, vit.num_classes, (batch,), device=device)
    step = bare_step(model, optimizer, torch.nn.functional.cross_entropy, torch.device(device), precision)
    per_image = seconds_per_call(lambda: step(images, labels), 2, device, warmup=1) / batch
    state = {"state_dict": model.state_dict(), "optimizer_states": [optimizer.state_dict()]}
    with tempfile.TemporaryDirectory(dir=folder, prefix=".estimate-") as tmp:
        checkpoint_s = seconds_per_call(lambda: save_torch(state, Path(tmp) / "last.ckpt"), 1, device)
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
    """Each probe of ``analysis`` (the run's probes, settings and batch size, as JSON: a cache key) and ``TRACK``,
    timed by the benchmark's ``time_probes`` on random images of the model's shape, on its device.

    A run's probe takes its images in batches of ``analysis.batch_size`` on every thread, a few milliseconds an
    image. On a few images the threads cost more than they do, and that overhead swings with the other work on the
    machine: a line through such timings once counted 0.84 s an image. So the probes are timed on one thread, where
    an image costs the same in a small batch as in a large one: on ``PROBE_IMAGES[0]``, ``[1]``, then ``[0]`` again
    (the shorter counts: the first pays the first-call costs); the per-image part of the line through them is then
    divided by the speed-up the threads give a plain forward pass over one analysis batch."""
    model = build_vit(vit).to(device).eval()
    cfg = OmegaConf.create(
        {"analysis": json.loads(analysis), "rung": "estimate", "model": {"patch_size": vit.patch_size}}
    )
    few, many, batch = *PROBE_IMAGES, int(cfg.analysis.batch_size)
    size = (max(many, batch), 3, vit.img_size, vit.img_size)
    images = torch.randint(0, 256, size, dtype=torch.uint8, device=device)
    labels = torch.randint(0, vit.num_classes, size[:1], device=device)
    stats = ChannelStats((0.5,) * 3, (0.25,) * 3)

    @torch.no_grad()
    def forward_s() -> float:
        return seconds_per_call(lambda: model(normalize(images[:batch], stats.mean, stats.std)), 1, device, warmup=1)

    threads, on_all_threads = torch.get_num_threads(), forward_s()
    torch.set_num_threads(1)
    try:
        speedup = forward_s() / on_all_threads
        first, more, again = (
            time_probes(model, images[:n], labels[:n], cfg, stats, rounds=1, track=True, warmup=False)[0]
            for n in (few, many, few)
        )
    finally:
        torch.set_num_threads(threads)
    costs = {}
    for name, more_s in more.items():
        few_s = min(first[name], again[name])
        per_image = max(more_s - few_s, 0.0) / (many - few)
        costs[name] = ProbeCost(max(few_s - per_image * few, 0.0), per_image / speedup)
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
    shape = {key: cfg.model[key] for key in ("patch_size", "embed_dim", "depth", "num_heads", "mlp_ratio")}
    vit = ViTConfig(**shape, img_size=data.image_size, num_classes=data.num_classes)
    folder = str(existing_folder(Path(cfg.run_dir)))
    cost = step_cost(vit, int(cfg.data.batch_size), device, folder, str(cfg.trainer.precision), fused_adamw(cfg))
    epochs, _ = scaled_epochs(cfg)
    epoch_s = (data.num_train + EVAL_COST * data.num_val) * cost.per_image_s
    saves = saves_in(epochs, epoch_s, int(cfg.checkpoint.every_n_epochs), float(cfg.checkpoint.min_interval_s))
    test_s = EVAL_COST * data.num_test * cost.per_image_s
    analysis_s = analysis_seconds(cfg, data, vit, device, epochs)
    return epochs * epoch_s + test_s + saves * cost.checkpoint_s + analysis_s + RUN_OVERHEAD_S


def analysis_seconds(cfg: DictConfig, data: DataShape, vit: ViTConfig, device: str, epochs: int) -> float:
    """The final analysis (each probe on the first ``analysis.num_images`` test images, or fewer where its ``images``
    setting says so) and the tracking (at the start and every ``track_every_n_epochs``)."""
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
    return next(folder for folder in [path.absolute(), *path.absolute().parents] if folder.is_dir())


def data_shape(cfg: DictConfig) -> DataShape:
    """The shape of a run's data as its datamodule splits it, loaded (or downloaded) once for every run that follows
    in the process."""
    data = ImageDataModule(cfg.data, seed=int(cfg.seed))
    data.setup()
    return DataShape(*(len(s.labels) for s in (data.train, data.val, data.test)), data.image_size, data.num_classes)


def estimate_ladder(cfgs: Sequence[DictConfig]) -> list[float]:
    """Each run's seconds, the data of runs that share it loaded once."""
    shapes = {data: data_shape(cfg) for data, cfg in {str(cfg.data): cfg for cfg in cfgs}.items()}
    return [estimate_run_seconds(cfg, shapes[str(cfg.data)]) for cfg in cfgs]
