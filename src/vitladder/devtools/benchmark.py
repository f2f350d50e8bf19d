"""How fast the project trains and analyses, against a bare PyTorch loop doing the same work.

Four figures per model width, each the median of several alternating rounds:

- **project images/s**: ``RecipeModule`` fed by ``ImageDataModule``'s ``DeviceBatches`` through
  ``L.Trainer.fit`` (no logger, no checkpointing, no progress bar), steady-state steps only;
- **bare images/s**: the same ``build_vit`` model, optimizer (fused or not, as the run's CUDA choices say), loss,
  batches, precision (fp16 with a loss scaler, as Lightning's 16-mixed) and device in a plain ``for`` loop. Their
  ratio is Lightning's (and the module's) overhead;
- **data share**: iterating ``DeviceBatches`` alone (gather, crop, flip, normalise) over a project step;
- **probes**: each configured probe (``analysis.probes``, with the rung's settings) run as the callback runs
  them (eval mode, no gradients, on the device) on ``analysis_images`` test images: 1,000 on a GPU, fewer on a
  CPU, scaled linearly to 1,000 (a probe's work is per image or fixed); all of them against one training epoch,
  and the attention probe (attention captured, per-head metrics) against a plain forward pass;
- **loop costs** (``time_loop_costs``, once per width): the host syncs per training and per evaluation step
  of the project's path (``devtools.syncs``; 0 is the aim), and one ``last.ckpt`` of its state (weights,
  AdamW, loops) written and fsynced through ``AtomicCheckpointIO``, as a run saves it, with its size.

The epoch time extrapolates the project's images/s to the 45,000 training images of CIFAR-10.
Every figure is timed by ``devtools.timing``: the start of every step from step ``warmup`` to step
``warmup + steps`` is timestamped, so a step's time includes fetching its batch and every hook; a round's
figure is the median of its step times on the CPU, the whole span over ``steps`` on CUDA. The ratio is the
median over rounds of each round's project/bare pair, the two run back to back in alternating order.
"""

from __future__ import annotations

import platform
import statistics
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import lightning as L
import torch
from omegaconf import DictConfig
from timm.optim import create_optimizer_v2
from torch import Tensor, nn

from vitladder.config import compose_rung
from vitladder.cuda_choices import fused_adamw, run_choices, use_tensor_cores
from vitladder.data.augment import normalize
from vitladder.data.datamodule import ImageDataModule, Split
from vitladder.data.device_batches import DeviceBatches
from vitladder.data.stats import ChannelStats
from vitladder.devtools.syncs import HostSyncs
from vitladder.devtools.timing import StepClock, bare_step, time_steps
from vitladder.model import ViTConfig, build_vit, num_parameters
from vitladder.training.checkpoint_io import AtomicCheckpointIO
from vitladder.training.run import build_module

__all__ = [
    "BenchSettings",
    "CIFAR10_TRAIN_IMAGES",
    "TARGETS",
    "TRACK",
    "format_table",
    "run_benchmark",
    "settings_for",
    "time_bare",
    "time_data",
    "time_loop_costs",
    "time_probes",
    "time_project",
]

CIFAR10_TRAIN_IMAGES = 45_000  # 50,000 minus the 5,000 held out for validation
TARGETS = {
    "project_over_bare_min": 0.95,
    "data_share_max": 0.05,
    "analysis_over_forward_max": 1.3,
    "host_syncs_per_step_max": 0,
    "checkpoint_share_max": 0.05,
    "probes_over_epoch_max": 1.0,  # every probe on 1,000 images within one training epoch (issue 22)
}
WIDTHS = {"tiny": 48, "full": 384}  # tiny: the smoke profile's width; full: docs/design.md §1
EVAL_STEPS = 2  # evaluation steps whose host syncs are counted
CHECKPOINT_SAVES = 3  # timed saves of last.ckpt, after one untimed
TRACK = "track"  # time_probes(track=True): every probe's tracking during training


@dataclass(frozen=True)
class BenchSettings:
    width: str  # "tiny" or "full"
    embed_dim: int
    device: str  # "cpu" or "cuda"
    batch_size: int
    warmup: int  # steps run before the clock starts
    steps: int  # steps timed
    rounds: int  # project, bare and data alternate this many times; medians are reported
    analysis_images: int = 1000
    analysis_rounds: int = 3
    rung: str = "patch4"  # 64 patches, random crop + flip: the augmentation is part of every batch
    compile: bool = False
    rehearse_cuda: bool = False  # speed.rehearse_cuda: a bf16 GPU's choices (bf16-mixed, fused AdamW) on any device


def settings_for(width: str, device: str) -> BenchSettings:
    """Defaults sized so that a CPU run of both widths takes a few minutes (full width: ~20 images/s)."""
    if width not in WIDTHS:
        raise ValueError(f"width must be one of {', '.join(WIDTHS)}, got '{width}'")
    if device == "cuda":  # the batch a GPU run trains with: the full profile's (conf/config.yaml)
        batch_size = int(compose_rung("patch4", []).data.batch_size)
        return BenchSettings(
            width, WIDTHS[width], device, batch_size=batch_size, warmup=10, steps=40, rounds=5, analysis_rounds=5
        )
    if width == "tiny":
        return BenchSettings(
            width,
            WIDTHS[width],
            device,
            batch_size=128,
            warmup=3,
            steps=12,
            rounds=9,
            analysis_rounds=5,
            analysis_images=200,
        )
    return BenchSettings(
        width, WIDTHS[width], device, batch_size=32, warmup=2, steps=4, rounds=7, analysis_rounds=3, analysis_images=50
    )


def bench_config(s: BenchSettings) -> DictConfig:
    """The rung's config at the benchmark's width and batch size, on synthetic data large enough for it."""
    num_train = (s.warmup + s.steps + 2) * s.batch_size
    num_val = (EVAL_STEPS + 1) * s.batch_size  # time_loop_costs counts the evaluation steps after the first
    return compose_rung(
        s.rung,
        [
            "data=synthetic",
            f"data.num_train={num_train + num_val}",
            f"data.num_test={s.analysis_images}",
            f"data.val_size={num_val}",
            "data.train_subset=null",
            "data.test_subset=null",
            f"data.batch_size={s.batch_size}",
            f"data.eval_batch_size={s.batch_size}",  # EVAL_STEPS + 1 evaluation batches of the same images
            f"model.embed_dim={s.embed_dim}",
            f"trainer.accelerator={s.device}",
            f"speed.compile={str(s.compile).lower()}",
            f"speed.rehearse_cuda={str(s.rehearse_cuda).lower()}",
            "analysis.enabled=false",
        ],
    )


def _vit_config(cfg: DictConfig, datamodule: ImageDataModule) -> ViTConfig:
    """The rung's ViT for the data's classes and image size, as build_module makes it."""
    return ViTConfig(**{**cfg.model, "num_classes": datamodule.num_classes, "img_size": datamodule.image_size})


def _train_batches(datamodule: ImageDataModule) -> DeviceBatches:
    batches = datamodule.train_dataloader()
    batches.set_epoch(0)
    return batches


# --- the project's path: RecipeModule + ImageDataModule through L.Trainer.fit -----------------------


class _StepClockCallback(L.Callback):
    """``StepClock`` inside ``trainer.fit``: Lightning drives the loop, so ``time_steps`` cannot; the clock
    is the same, stamped at the start of every training batch."""

    def __init__(self, clock: StepClock) -> None:
        self.clock = clock

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int) -> None:
        self.clock.at_step(batch_idx)


def time_project(cfg: DictConfig, datamodule: ImageDataModule, s: BenchSettings) -> float:
    """Seconds per steady-state training step of the project's Lightning path."""
    module = build_module(cfg, datamodule)
    clock = StepClock(s.warmup, s.steps, torch.device(s.device))
    # The last batch only stops the clock.
    trainer = _trainer(cfg, s, _StepClockCallback(clock), limit_train_batches=s.warmup + s.steps + 1)
    trainer.fit(module, datamodule=datamodule)
    return clock.seconds_per_step()


def _trainer(cfg: DictConfig, s: BenchSettings, callback: L.Callback, **limits) -> L.Trainer:
    """One epoch of the project's path on one device, quiet: no logger, checkpoint callback or sanity steps;
    checkpoints (if asked for) written as a run writes them."""
    return L.Trainer(
        accelerator=s.device,
        devices=1,
        precision=cfg.trainer.precision,
        max_epochs=1,
        **{"limit_val_batches": 0, **limits},
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback],
        plugins=[AtomicCheckpointIO()],
    )


def host_step_counts(optimizers: list[torch.optim.Optimizer]) -> set[int]:
    """The ids of the step counts an optimizer keeps on the host on CUDA too, so that reading them is no device sync:
    those of torch's AdamW unless it is fused or capturable (which keep them on the device and never read them)."""
    return {
        id(optimizer.state[param]["step"])
        for optimizer in optimizers
        for group in optimizer.param_groups
        if not (group.get("fused") or group.get("capturable"))
        for param in group["params"]
        if "step" in optimizer.state.get(param, {})
    }


class _CountSteps(L.Callback):
    """``HostSyncs`` on from the start of training batch ``warmup`` to the start of batch ``warmup + steps``, and
    over the evaluation batches after the first: whole steps (the batch fetched, every hook), no epoch ends."""

    def __init__(self, syncs: HostSyncs, warmup: int, steps: int) -> None:
        self.syncs, self.warmup, self.steps = syncs, warmup, steps

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int) -> None:
        self.syncs.exempt = host_step_counts(trainer.optimizers)
        self.syncs.on = self.warmup <= batch_idx < self.warmup + self.steps

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.syncs.on = batch_idx >= 1

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.syncs.on = False


def time_loop_costs(cfg: DictConfig, datamodule: ImageDataModule, s: BenchSettings, folder: Path) -> dict:
    """Host syncs per training step and per evaluation step of the project's Lightning path, and the seconds and
    MiB of one last.ckpt of its trained state, written into ``folder`` as a run writes it (AtomicCheckpointIO:
    a temporary file beside it, fsynced, renamed)."""
    module = build_module(cfg, datamodule)
    with HostSyncs(cuda=s.device == "cuda") as syncs:
        counter = _CountSteps(syncs, s.warmup, s.steps)
        fitted = _trainer(cfg, s, counter, limit_train_batches=s.warmup + s.steps + 1)
        fitted.fit(module, datamodule=datamodule)
        train = syncs.total, syncs.cuda
        _trainer(cfg, s, counter, limit_val_batches=EVAL_STEPS + 1).validate(
            module, datamodule=datamodule, verbose=False
        )
        evaluate = syncs.total - train[0], None if syncs.cuda is None else syncs.cuda - train[1]
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".bench-checkpoint-") as tmp:
        path = Path(tmp) / "last.ckpt"
        save_s = time_steps(
            lambda: fitted.save_checkpoint(path, weights_only=False), 1, CHECKPOINT_SAVES, torch.device(s.device)
        )
        mib = path.stat().st_size / 2**20
    return {
        "host_syncs_per_step": {"train": train[0] / s.steps, "eval": evaluate[0] / EVAL_STEPS},
        "cuda_syncs_per_step": None
        if syncs.cuda is None
        else {"train": train[1] / s.steps, "eval": evaluate[1] / EVAL_STEPS},
        "checkpoint_s": save_s,
        "checkpoint_mib": mib,
    }


# --- the bare loop ----------------------------------------------------------------------------------


def time_bare(cfg: DictConfig, datamodule: ImageDataModule, s: BenchSettings) -> float:
    """Seconds per steady-state step of a plain PyTorch loop over the same batches."""
    device = torch.device(s.device)
    model = build_vit(_vit_config(cfg, datamodule)).to(device).train()
    if s.compile:
        model.compile()
    use_tensor_cores(run_choices(cfg))
    optim = cfg.optim
    optimizer = create_optimizer_v2(
        model,
        opt="adamw",
        lr=optim.lr,
        weight_decay=optim.weight_decay,
        betas=tuple(optim.betas),
        **({"fused": True} if fused_adamw(cfg) else {}),
    )
    criterion = nn.CrossEntropyLoss(label_smoothing=float(cfg.loss.label_smoothing))
    step = bare_step(model, optimizer, criterion, device, cfg.trainer.precision)
    batches: Iterator[tuple[Tensor, Tensor]] = iter(_train_batches(datamodule))  # (B, 3, H, W), (B,) on the device
    return time_steps(lambda: step(*next(batches)), s.warmup, s.steps, device)


def time_data(datamodule: ImageDataModule, s: BenchSettings) -> float:
    """Seconds per batch of ``DeviceBatches`` alone: index, gather, crop, flip, normalise."""
    batches: Iterator[tuple[Tensor, Tensor]] = iter(_train_batches(datamodule))
    return time_steps(lambda: next(batches), s.warmup, s.steps, torch.device(s.device))


# --- analysis against a forward pass ---------------------------------------------------------------


def time_probes(
    model: nn.Module,
    images_u8: Tensor,
    labels: Tensor,
    cfg: DictConfig,
    stats: ChannelStats,
    rounds: int,
    track: bool = False,
    warmup: bool = True,
) -> tuple[dict[str, float], float]:
    """(median seconds of each probe of ``cfg.analysis.probes``, median seconds of a plain eval forward pass) over
    ``images_u8`` ``(N, 3, S, S)`` on the model's device. The probes run as the callback runs them (its context,
    the rung's settings; eval mode, no gradients), the forward pass in the model's float32 batch by batch;
    the two alternate each round, after one untimed call of each on a few images (first-call costs) unless not
    ``warmup``. With ``track``, also ``TRACK``: what the callback measures on its tracking images each tracked
    epoch (every probe's ``track``), on the same images."""
    from vitladder.analysis.callback import AttentionAnalysis
    from vitladder.analysis.probes import run_probes, track_probes

    callback = AttentionAnalysis.from_config(cfg.analysis, Path("unused"), str(cfg.rung), int(cfg.model.patch_size))
    ctx, device, batch = callback.context(images_u8.shape[-1], stats, None), next(model.parameters()).device, 250
    model.eval()

    @torch.no_grad()
    def forward(images: Tensor = images_u8) -> None:
        for start in range(0, len(images), batch):
            model(normalize(images[start : start + batch], stats.mean, stats.std))  # (B, num_classes)

    timed = {
        name: lambda i=images_u8, n=name: run_probes(model, i, labels[: len(i)], ctx, [n])
        for name in cfg.analysis.probes
    }
    if track:
        timed[TRACK] = lambda i=images_u8: track_probes(model, i, ctx, cfg.analysis.probes)
    timed["forward"] = forward
    times: dict[str, list[float]] = {name: [] for name in timed}
    for fn in timed.values() if warmup else ():
        fn(images_u8[:8])
    for r in range(rounds):
        for name, fn in list(timed.items())[:: 1 if r % 2 == 0 else -1]:
            times[name].append(time_steps(fn, warmup=0, steps=1, device=device))
    medians = {name: statistics.median(t) for name, t in times.items()}
    return medians, medians.pop("forward")


# --- one width, then the whole benchmark -------------------------------------------------------------


def _prepare_data(cfg: DictConfig, device: torch.device) -> ImageDataModule:
    datamodule = ImageDataModule(cfg.data, seed=int(cfg.seed))
    datamodule.prepare_data()
    datamodule.setup()
    datamodule.train, datamodule.val, datamodule.test = (
        Split(split.images.to(device), split.labels.to(device))
        for split in (datamodule.train, datamodule.val, datamodule.test)
    )
    return datamodule


def bench_width(s: BenchSettings, folder: Path, log: Callable[[str], None] = print) -> dict:
    """Every figure for one width; the per-round values are kept beside their medians. ``folder``: where the
    checkpoint is written (the disk a run's last.ckpt goes to)."""
    device = torch.device(s.device)
    cfg = bench_config(s)
    torch.manual_seed(0)
    datamodule = _prepare_data(cfg, device)
    project, bare, data = [], [], []
    for r in range(s.rounds):
        order = (
            ("project", project, lambda: time_project(cfg, datamodule, s)),
            ("bare", bare, lambda: time_bare(cfg, datamodule, s)),
        )
        for _name, times, fn in order if r % 2 == 0 else order[::-1]:
            times.append(fn())
        data.append(time_data(datamodule, s))
        log(
            f"  [{s.width}] round {r + 1}/{s.rounds}: project {s.batch_size / project[-1]:.1f} img/s, "
            f"bare {s.batch_size / bare[-1]:.1f} img/s, data {1e3 * data[-1]:.2f} ms/batch"
        )

    model = build_vit(_vit_config(cfg, datamodule)).to(device)
    images = datamodule.test.images[: s.analysis_images]  # (N, 3, S, S) uint8 on the device
    labels = datamodule.test.labels[: s.analysis_images]
    probe_s, forward_s = time_probes(model, images, labels, cfg, datamodule.stats, s.analysis_rounds)
    analysis_s = probe_s["attention"]  # the per-head metrics: attention captured and reduced, against a forward pass
    per_1000 = {name: t * 1000 / len(images) for name, t in probe_s.items()}
    log(f"  [{s.width}] probes per 1,000 images: " + ", ".join(f"{n} {t:.2f} s" for n, t in per_1000.items()))

    # A few steps: their syncs are counted, not timed.
    costs = time_loop_costs(cfg, datamodule, replace(s, warmup=min(s.warmup, 2), steps=min(s.steps, 3)), folder)
    log(
        f"  [{s.width}] host syncs per step: train {costs['host_syncs_per_step']['train']:g}, "
        f"eval {costs['host_syncs_per_step']['eval']:g}; last.ckpt {costs['checkpoint_mib']:.1f} MiB in "
        f"{costs['checkpoint_s']:.2f} s"
    )

    project_step, bare_step, data_batch = (statistics.median(t) for t in (project, bare, data))
    project_ips, bare_ips = s.batch_size / project_step, s.batch_size / bare_step
    paired = statistics.median(b / p for p, b in zip(project, bare))  # each round's project/bare speed
    epoch_s = CIFAR10_TRAIN_IMAGES / project_ips
    return {
        "settings": asdict(s),
        "precision": cfg.trainer.precision,
        "parameters": num_parameters(model),
        "project_images_per_s": project_ips,
        "bare_images_per_s": bare_ips,
        "project_over_bare": paired,
        "project_over_bare_of_medians": project_ips / bare_ips,
        "project_step_s": project_step,
        "bare_step_s": bare_step,
        "data_batch_s": data_batch,
        "data_share": data_batch / project_step,
        "epoch_s": epoch_s,
        "analysis_images": len(images),
        "analysis_s": analysis_s,
        "forward_s": forward_s,
        "analysis_over_forward": analysis_s / forward_s,
        "probe_s_per_1000_images": per_1000,
        "probes_over_epoch": sum(per_1000.values()) / epoch_s,
        **costs,
        # Saves at epoch ends once checkpoint.min_interval_s has passed: one per interval, or per epoch if longer.
        "checkpoint_share": costs["checkpoint_s"] / max(epoch_s, float(cfg.checkpoint.min_interval_s)),
        "rounds": {"project_step_s": project, "bare_step_s": bare, "data_batch_s": data},
        "meets_targets": {
            "project_over_bare": paired >= TARGETS["project_over_bare_min"],
            "data_share": data_batch / project_step <= TARGETS["data_share_max"],
            # The project's model only: at the tiny width a forward pass is ~40x cheaper, but the
            # attention maps the analysis reduces are just as large (6 heads x 65 x 65 per layer).
            "analysis_over_forward": (
                analysis_s / forward_s <= TARGETS["analysis_over_forward_max"] if s.width == "full" else None
            ),
            "host_syncs": max(costs["host_syncs_per_step"].values()) <= TARGETS["host_syncs_per_step_max"],
            "probes_over_epoch": sum(per_1000.values()) <= TARGETS["probes_over_epoch_max"] * epoch_s,
        },
    }


def run_benchmark(
    widths: list[str],
    device: str,
    overrides: dict | None = None,
    log: Callable[[str], None] = print,
    folder: Path = Path("outputs"),
) -> dict:
    """Benchmarks each width; ``overrides`` replace fields of every width's settings (e.g. steps=2). Checkpoints
    are written (and removed) in ``folder``."""
    results = {}
    for width in widths:
        s = replace(settings_for(width, device), **(overrides or {}))
        log(
            f"{width}: width {s.embed_dim}, batch {s.batch_size}, {s.warmup} warm-up + {s.steps} timed steps, "
            f"{s.rounds} rounds, on {device}"
        )
        results[width] = bench_width(s, folder, log)
    return {
        "device": device,
        "device_name": torch.cuda.get_device_name() if device == "cuda" else platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "lightning": L.__version__,
        "cpu_threads": torch.get_num_threads(),
        "targets": TARGETS,
        "widths": results,
    }


def format_table(report: dict) -> str:
    """The figures of every width as a plain-text table, each against its target."""
    rows = [
        ("project images/s", lambda r: f"{r['project_images_per_s']:.1f}", ""),
        ("bare loop images/s", lambda r: f"{r['bare_images_per_s']:.1f}", ""),
        (
            "project / bare (paired)",
            lambda r: f"{r['project_over_bare']:.3f}",
            f">= {TARGETS['project_over_bare_min']}",
        ),
        ("data pipeline ms/batch", lambda r: f"{1e3 * r['data_batch_s']:.2f}", ""),
        (
            "data share of a step",
            lambda r: f"{100 * r['data_share']:.2f}%",
            f"<= {100 * TARGETS['data_share_max']:.0f}%",
        ),
        ("CIFAR-10 epoch (45k)", lambda r: _duration(r["epoch_s"]), ""),
        ("attention probe s (N images)", lambda r: f"{r['analysis_s']:.2f} ({r['analysis_images']})", ""),
        ("forward s (N images)", lambda r: f"{r['forward_s']:.2f} ({r['analysis_images']})", ""),
        (
            "attention probe / forward",
            lambda r: f"{r['analysis_over_forward']:.2f}x",
            f"<= {TARGETS['analysis_over_forward_max']}x (full)",
        ),
        *(
            (f"probe {name} s / 1k images", lambda r, n=name: _probe(r, n), "")
            for name in next(iter(report["widths"].values())).get("probe_s_per_1000_images", {})
        ),
        (
            "all probes / epoch",
            lambda r: f"{r['probes_over_epoch']:.3f}",
            f"<= {TARGETS['probes_over_epoch_max']:g}",
        ),
        ("host syncs / train step", lambda r: _syncs(r, "train"), "0"),
        ("host syncs / eval step", lambda r: _syncs(r, "eval"), "0"),
        ("last.ckpt write + fsync", lambda r: f"{r['checkpoint_s']:.2f} s ({r['checkpoint_mib']:.0f} MiB)", ""),
        (
            "checkpoint share of training",
            lambda r: f"{100 * r['checkpoint_share']:.2f}%",
            f"<= {100 * TARGETS['checkpoint_share_max']:.0f}%",
        ),
    ]
    widths = report["widths"]
    header = [
        "",
        *(f"{w} (d={r['settings']['embed_dim']}, B={r['settings']['batch_size']})" for w, r in widths.items()),
        "target",
    ]
    body = [[label, *(fmt(r) for r in widths.values()), target] for label, fmt, target in rows]
    cols = list(zip(header, *body))
    sizes = [max(len(c) for c in col) for col in cols]
    lines = [" | ".join(cell.ljust(n) for cell, n in zip(line, sizes)) for line in (header, *body)]
    lines.insert(1, "-+-".join("-" * n for n in sizes))
    title = (
        f"benchmark on {report['device']} ({report['device_name']}, torch {report['torch']}, "
        f"{report['cpu_threads']} threads); medians of alternating rounds; paired: the median of each round's ratio"
    )
    return "\n".join([title, *lines])


def _syncs(figures: dict, step: str) -> str:
    """Host syncs per step, and on CUDA what its sync debug mode counted."""
    cuda = figures["cuda_syncs_per_step"]
    return f"{figures['host_syncs_per_step'][step]:g}" + (f" (CUDA: {cuda[step]:g})" if cuda else "")


def _probe(figures: dict, name: str) -> str:
    """A probe's seconds per 1,000 images, and the images it was measured on where fewer."""
    measured = figures["analysis_images"]
    scaled = f" (from {measured})" if measured != 1000 else ""
    return f"{figures['probe_s_per_1000_images'][name]:.2f}{scaled}"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
