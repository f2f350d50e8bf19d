"""How fast the project trains and analyses, against a bare PyTorch loop doing the same work (``make bench``).

Per model width, the medians of alternating rounds of the project's images/s (``L.Trainer.fit``), a bare loop's
(the module's model, AdamW and loss on the same batches, precision and device, no MixUp: the ratio is Lightning's and
the module's overhead) and the data's share of a step; each configured probe on ``analysis_images`` test images,
scaled to 1,000, against one epoch; and once, the host syncs per training and evaluation step (0 is the aim) and one
``last.ckpt`` written and fsynced as a run saves it. A step is timed from its start to the next one's: ``per_step``.
"""

from __future__ import annotations

import platform
import statistics
import tempfile
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from time import perf_counter

import lightning as L
import torch
from omegaconf import DictConfig
from torch import Tensor, nn

from vitladder.config import compose_rung
from vitladder.data.augment import normalize
from vitladder.data.datamodule import ImageDataModule
from vitladder.data.stats import ChannelStats
from vitladder.devtools.syncs import HostSyncs
from vitladder.model import num_parameters
from vitladder.training.checkpoint_io import AtomicCheckpointIO
from vitladder.training.run import build_module

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
Log = Callable[[str], None]  # where the progress lines go


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
        batch = int(compose_rung("patch4", []).data.batch_size)
        return BenchSettings(width, WIDTHS[width], device, batch, warmup=10, steps=40, rounds=5, analysis_rounds=5)
    if width == "tiny":
        return BenchSettings(width, 48, device, 128, 3, 12, rounds=9, analysis_rounds=5, analysis_images=200)
    return BenchSettings(width, 384, device, 32, 2, 4, rounds=7, analysis_rounds=3, analysis_images=50)


def bench_config(s: BenchSettings) -> DictConfig:
    """The rung's config at the benchmark's width and batch, on synthetic data large enough for it: EVAL_STEPS + 1
    evaluation batches of the training batch's size."""
    num_train, num_val = (s.warmup + s.steps + 2) * s.batch_size, (EVAL_STEPS + 1) * s.batch_size
    overrides = (
        f"data=synthetic data.num_train={num_train + num_val} data.num_test={s.analysis_images} analysis.enabled=false "
        f"data.val_size={num_val} data.train_subset=null data.test_subset=null data.batch_size={s.batch_size} "
        f"data.eval_batch_size={s.batch_size} model.embed_dim={s.embed_dim} trainer.accelerator={s.device} "
        f"speed.compile={str(s.compile).lower()} speed.rehearse_cuda={str(s.rehearse_cuda).lower()}"
    )
    return compose_rung(s.rung, overrides.split())


def synced() -> float:
    """The time once the GPU's queued work is done (CUDA runs ahead of the host). torch.utils.benchmark's clock does
    the same, but importing that package imports torch.utils.cpp_extension and setuptools, which logs a line."""
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return perf_counter()


def per_step(starts: list[float], device: str | torch.device) -> float:
    """Seconds per step from the start times of consecutive steps: on a GPU their span over the steps (its launches
    run ahead of the device), on the CPU the median step (robust to other jobs' bursts on a shared machine)."""
    if torch.device(device).type == "cuda":
        return (starts[-1] - starts[0]) / (len(starts) - 1)
    return statistics.median(b - a for a, b in zip(starts, starts[1:]))


class _StepStarts(L.Callback):
    """The start times of steps ``first`` to ``last``, the device synchronised at those two only (Lightning's
    ThroughputMonitor synchronises it after every batch, a wait the run does not have): every figure's clock."""

    def __init__(self, first: int, last: int) -> None:
        self.first, self.last, self.starts = first, last, []

    def stamp(self, step: int) -> None:
        if self.first <= step <= self.last:
            self.starts.append(synced() if step in (self.first, self.last) else perf_counter())

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int) -> None:
        self.stamp(batch_idx)


def seconds_per_call(fn: Callable[[], object], calls: int, device: str | torch.device, warmup: int = 0) -> float:
    """Seconds per call of ``fn`` after ``warmup`` untimed calls, stamped and counted as Lightning's steps are."""
    clock = _StepStarts(warmup, warmup + calls)
    for call in range(warmup + calls):
        clock.stamp(call)
        fn()
    clock.stamp(warmup + calls)
    return per_step(clock.starts, device)


def _trainer(cfg: DictConfig, s: BenchSettings, *callbacks: L.Callback, **limits) -> L.Trainer:
    """One quiet epoch on one device: no logger, checkpoint callback or sanity steps; a checkpoint (when asked for)
    written as a run writes it."""
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
        callbacks=list(callbacks),
        plugins=[AtomicCheckpointIO()],
    )


def bench_data(cfg: DictConfig, s: BenchSettings) -> ImageDataModule:
    datamodule = ImageDataModule(cfg.data, seed=int(cfg.seed))
    datamodule.trainer = _trainer(cfg, s)  # setup puts the splits on the trainer's device
    datamodule.setup()
    return datamodule


def _train_batches(datamodule: ImageDataModule):
    batches = datamodule.train_dataloader()
    batches.set_epoch(0)
    return iter(batches)  # (B, 3, S, S) float, (B,) int64 on the device


def time_project(cfg: DictConfig, datamodule: ImageDataModule, s: BenchSettings) -> float:
    """Seconds per steady-state training step of the project's Lightning path."""
    starts = _StepStarts(s.warmup, s.warmup + s.steps)  # the last batch only stops the clock
    trainer = _trainer(cfg, s, starts, limit_train_batches=s.warmup + s.steps + 1)
    trainer.fit(build_module(cfg, datamodule), datamodule=datamodule)
    return per_step(starts.starts, s.device)


def bare_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: Callable, device: torch.device, precision: str
) -> Callable[[Tensor, Tensor], None]:
    """One plain PyTorch training step in a run's ``trainer.precision``, as Lightning's precision plugin takes it:
    bf16 or fp16 autocast, and under 16-mixed a loss scaler (the step skipped on an overflow)."""
    if precision not in ("bf16-mixed", "16-mixed", "32-true", "32"):
        raise ValueError(f"the bare step does not support precision '{precision}'")
    half = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(precision)
    autocast = torch.autocast(device.type, dtype=half) if half else nullcontext()
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "16-mixed")

    def step(images: Tensor, labels: Tensor) -> None:
        with autocast:
            loss = loss_fn(model(images), labels)
        scaler.scale(loss).backward()  # disabled: the loss itself, and step() below is optimizer.step()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

    return step


def time_bare(cfg: DictConfig, datamodule: ImageDataModule, s: BenchSettings) -> float:
    """Seconds per steady-state step of a plain PyTorch loop over the same batches."""
    device = torch.device(s.device)
    module = build_module(cfg, datamodule).to(device)  # its model, and the run's TF32 setting
    module.configure_model()  # torch.compile, when asked for
    module.trainer = _trainer(cfg, s)  # configure_optimizers sizes its schedule by the trainer's limits
    optimizer = module.configure_optimizers()["optimizer"]
    loss = nn.CrossEntropyLoss(label_smoothing=float(cfg.loss.label_smoothing))
    step, batches = bare_step(module.model, optimizer, loss, device, cfg.trainer.precision), _train_batches(datamodule)
    return seconds_per_call(lambda: step(*next(batches)), s.steps, device, s.warmup)


def time_data(datamodule: ImageDataModule, s: BenchSettings) -> float:
    """Seconds per batch of ``DeviceBatches`` alone: index, gather, crop, flip, normalise."""
    batches = _train_batches(datamodule)
    return seconds_per_call(lambda: next(batches), s.steps, s.device, s.warmup)


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
    """Host syncs per training and per evaluation step of the project's Lightning path, and the seconds and MiB of
    one last.ckpt of its trained state, written into ``folder`` as a run writes it (AtomicCheckpointIO)."""
    module, host, cuda = build_module(cfg, datamodule), {}, {}
    with HostSyncs(cuda=s.device == "cuda") as syncs:
        counter = _CountSteps(syncs, s.warmup, s.steps)
        fitted = _trainer(cfg, s, counter, limit_train_batches=s.warmup + s.steps + 1)
        fitted.fit(module, datamodule=datamodule)
        host["train"], cuda["train"] = syncs.total / s.steps, (syncs.cuda or 0) / s.steps
        syncs.seen.clear()  # then the evaluation's own
        syncs.cuda = None if syncs.cuda is None else 0
        evaluator = _trainer(cfg, s, counter, limit_val_batches=EVAL_STEPS + 1)
        evaluator.validate(module, datamodule=datamodule, verbose=False)
        host["eval"], cuda["eval"] = syncs.total / EVAL_STEPS, (syncs.cuda or 0) / EVAL_STEPS
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".bench-checkpoint-") as tmp:
        path = Path(tmp) / "last.ckpt"
        save_s = seconds_per_call(lambda: fitted.save_checkpoint(path), CHECKPOINT_SAVES, s.device, warmup=1)
        mib = path.stat().st_size / 2**20
    cuda = None if syncs.cuda is None else cuda
    return {"host_syncs_per_step": host, "cuda_syncs_per_step": cuda, "checkpoint_s": save_s, "checkpoint_mib": mib}


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
    """(median seconds of each probe of ``cfg.analysis.probes``, and of a plain forward pass) over ``images_u8``
    ``(N, 3, S, S)`` on the model's device: the probes as the callback runs them (its context and settings), the
    forward pass in batches of ``analysis.batch_size``, in alternating rounds, after one untimed call of each on a
    few images (first-call costs) unless not ``warmup``. With ``track``, also ``TRACK``: every probe's tracking."""
    from vitladder.analysis.callback import AttentionAnalysis
    from vitladder.analysis.probes import run_probes, track_probes

    callback = AttentionAnalysis.from_config(cfg.analysis, Path("unused"), str(cfg.rung), int(cfg.model.patch_size))
    ctx, device = callback.context(images_u8.shape[-1], stats, None), next(model.parameters()).device
    model.eval()

    @torch.no_grad()
    def forward(images: Tensor = images_u8) -> None:
        for start in range(0, len(images), ctx.batch_size):
            model(normalize(images[start : start + ctx.batch_size], stats.mean, stats.std))  # (B, num_classes)

    timed = {
        name: lambda i=images_u8, n=name: run_probes(model, i, labels[: len(i)], ctx, [n]) for name in callback.probes
    }
    if track:
        timed[TRACK] = lambda i=images_u8: track_probes(model, i, ctx, callback.probes)
    timed["forward"] = forward
    for fn in timed.values() if warmup else ():
        fn(images_u8[:8])
    times: dict[str, list[float]] = {name: [] for name in timed}
    for r in range(rounds):  # alternating: no probe always goes first
        for name, fn in list(timed.items())[:: -1 if r % 2 else 1]:
            times[name].append(seconds_per_call(fn, 1, device))
    medians = {name: statistics.median(t) for name, t in times.items()}
    return medians, medians.pop("forward")


def bench_width(s: BenchSettings, folder: Path, log: Log) -> dict:
    """Every figure for one width, the per-round values beside their medians; ``folder``: where the checkpoint is
    written (the disk a run's last.ckpt goes to)."""
    cfg = bench_config(s)
    torch.manual_seed(0)
    datamodule = bench_data(cfg, s)
    timers = {
        "project_step_s": lambda: time_project(cfg, datamodule, s),
        "bare_step_s": lambda: time_bare(cfg, datamodule, s),
        "data_batch_s": lambda: time_data(datamodule, s),
    }
    rounds: dict[str, list[float]] = {name: [] for name in timers}
    for r in range(s.rounds):  # alternating: neither loop always goes first
        for name, timer in list(timers.items())[:: -1 if r % 2 else 1]:
            rounds[name].append(timer())
        project, bare, data = (times[-1] for times in rounds.values())
        log(
            f"  [{s.width}] round {r + 1}/{s.rounds}: project {s.batch_size / project:.1f} img/s, "
            f"bare {s.batch_size / bare:.1f} img/s, data {1e3 * data:.2f} ms/batch"
        )

    model = build_module(cfg, datamodule).model.to(s.device)
    images, labels = datamodule.test.images[: s.analysis_images], datamodule.test.labels[: s.analysis_images]
    probe_s, forward_s = time_probes(model, images, labels, cfg, datamodule.stats, s.analysis_rounds)
    per_1000 = {name: t * 1000 / len(images) for name, t in probe_s.items()}
    log(f"  [{s.width}] probes per 1,000 images: " + ", ".join(f"{n} {t:.2f} s" for n, t in per_1000.items()))

    # A few steps: their syncs are counted, not timed.
    costs = time_loop_costs(cfg, datamodule, replace(s, warmup=min(s.warmup, 2), steps=min(s.steps, 3)), folder)
    syncs = costs["host_syncs_per_step"]
    log(
        f"  [{s.width}] host syncs per step: train {syncs['train']:g}, eval {syncs['eval']:g}; "
        f"last.ckpt {costs['checkpoint_mib']:.1f} MiB in {costs['checkpoint_s']:.2f} s"
    )

    project, bare, data = (statistics.median(t) for t in rounds.values())
    paired = statistics.median(b / p for p, b in zip(rounds["project_step_s"], rounds["bare_step_s"]))
    epoch_s, analysis_s = CIFAR10_TRAIN_IMAGES * project / s.batch_size, probe_s["attention"]
    figures = {"settings": asdict(s), "precision": cfg.trainer.precision, "parameters": num_parameters(model)}
    figures |= {"project_images_per_s": s.batch_size / project, "bare_images_per_s": s.batch_size / bare}
    figures |= {"project_over_bare": paired, "project_over_bare_of_medians": bare / project}
    figures |= {"project_step_s": project, "bare_step_s": bare, "data_batch_s": data, "data_share": data / project}
    # analysis_s: the attention probe, attention captured and reduced to per-head metrics
    figures |= {"epoch_s": epoch_s, "analysis_images": len(images), "analysis_s": analysis_s, "forward_s": forward_s}
    figures |= {"analysis_over_forward": analysis_s / forward_s, "probe_s_per_1000_images": per_1000}
    figures |= {"probes_over_epoch": sum(per_1000.values()) / epoch_s, **costs, "rounds": rounds}
    # Saves at epoch ends once checkpoint.min_interval_s has passed: one per interval, or per epoch if longer.
    figures["checkpoint_share"] = costs["checkpoint_s"] / max(epoch_s, float(cfg.checkpoint.min_interval_s))
    at_most = ("data_share", "analysis_over_forward", "probes_over_epoch", "checkpoint_share")
    met = {"project_over_bare": paired >= TARGETS["project_over_bare_min"]}
    met |= {figure: figures[figure] <= TARGETS[f"{figure}_max"] for figure in at_most}
    met["host_syncs"] = max(syncs.values()) <= TARGETS["host_syncs_per_step_max"]
    # The analysis's target is the project's model's: at the tiny width a forward pass is ~40x cheaper, but the
    # attention maps the analysis reduces are just as large (6 heads x 65 x 65 per layer).
    met["analysis_over_forward"] = met["analysis_over_forward"] if s.width == "full" else None
    return figures | {"meets_targets": met}


def machine(device: str) -> dict:
    """The device's name and the versions the figures were measured with."""
    import timm

    name = torch.cuda.get_device_name() if device == "cuda" else platform.processor() or platform.machine()
    versions = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version()}
    versions |= {"lightning": L.__version__, "timm": timm.__version__}
    return {"device_name": name, **versions, "cpu_threads": torch.get_num_threads()}


def run_benchmark(widths: list[str], device: str, overrides: dict, folder: Path, log: Log = print) -> dict:
    """Benchmarks each width; ``overrides`` replace fields of every width's settings (e.g. steps=2). Checkpoints are
    written (and removed) in ``folder``."""
    results = {}
    for width in widths:
        s = replace(settings_for(width, device), **overrides)
        log(
            f"{width}: width {s.embed_dim}, batch {s.batch_size}, {s.warmup} warm-up + {s.steps} timed steps, "
            f"{s.rounds} rounds, on {device}"
        )
        results[width] = bench_width(s, folder, log)
    return {"device": device, **machine(device), "targets": TARGETS, "widths": results}


def format_table(report: dict) -> str:
    """The figures of every width as a plain-text table, each against its target: a row's cell is its format string
    filled with the width's figures, or what its function makes of them."""
    t, widths = TARGETS, report["widths"]
    probes = next(iter(widths.values()))["probe_s_per_1000_images"]
    rows = [
        ("project images/s", "{project_images_per_s:.1f}", ""),
        ("bare loop images/s", "{bare_images_per_s:.1f}", ""),
        ("project / bare (paired)", "{project_over_bare:.3f}", f">= {t['project_over_bare_min']}"),
        ("data pipeline ms/batch", lambda r: f"{1e3 * r['data_batch_s']:.2f}", ""),
        ("data share of a step", "{data_share:.2%}", f"<= {t['data_share_max']:.0%}"),
        ("CIFAR-10 epoch (45k)", lambda r: _duration(r["epoch_s"]), ""),
        ("attention probe s (N images)", "{analysis_s:.2f} ({analysis_images})", ""),
        ("forward s (N images)", "{forward_s:.2f} ({analysis_images})", ""),
        ("attention probe / forward", "{analysis_over_forward:.2f}x", f"<= {t['analysis_over_forward_max']}x (full)"),
        *((f"probe {name} s / 1k images", lambda r, n=name: _probe(r, n), "") for name in probes),
        ("all probes / epoch", "{probes_over_epoch:.3f}", f"<= {t['probes_over_epoch_max']:g}"),
        ("host syncs / train step", lambda r: _syncs(r, "train"), "0"),
        ("host syncs / eval step", lambda r: _syncs(r, "eval"), "0"),
        ("last.ckpt write + fsync", "{checkpoint_s:.2f} s ({checkpoint_mib:.0f} MiB)", ""),
        ("checkpoint share of training", "{checkpoint_share:.2%}", f"<= {t['checkpoint_share_max']:.0%}"),
    ]
    head = ["", *(f"{w} (d={r['settings']['embed_dim']}, B={r['settings']['batch_size']})" for w, r in widths.items())]
    table = [[*head, "target"]]
    for label, cell, target in rows:
        table.append([label, *(cell(r) if callable(cell) else cell.format(**r) for r in widths.values()), target])
    sizes = [max(len(cell) for cell in column) for column in zip(*table)]
    lines = [" | ".join(cell.ljust(n) for cell, n in zip(line, sizes)) for line in table]
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
    return f"{figures['probe_s_per_1000_images'][name]:.2f}" + (f" (from {measured})" if measured != 1000 else "")


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"
