"""One prepared check of a GPU machine within a budget of seconds, with the project's own code (``make gpu-check``):
the top rung's training step benchmarked eager and ``torch.compile``d (``benchmark.time_project``, the path every run
takes), with its host syncs and one ``last.ckpt``; the ``epochs200`` recipe trained (``train_rung``) for as many of
its epochs as the measured speed and checkpoints fit into the rest of the budget (``profile.epoch_scale`` shortens the
schedule, warmup included; ``trainer.max_time`` is the hard stop), tested and analysed as every run is; then the
ladder report of that one run and ``gpu_check.md``. ``gpu_check.json`` is rewritten after each phase, so a crash
keeps what was measured before it and says where it came. ``smoke=True``: the same path at the smoke profile's width
on whatever device there is (the CPU rehearsal)."""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from omegaconf import DictConfig

from vitladder.analysis.outputs import read_csv
from vitladder.atomic import write_json, write_text
from vitladder.config import compose_rung, get_rung, scaled_epochs
from vitladder.cuda_choices import fused_adamw, on_cuda, run_choices
from vitladder.devtools.benchmark import BenchSettings, bench_data, machine, time_loop_costs, time_project
from vitladder.devtools.estimate import EVAL_COST
from vitladder.errors import UserError
from vitladder.pipeline import train_rung
from vitladder.report.ladder_report import build_report
from vitladder.report.setting import analysed, differences, epochs_text
from vitladder.run_folder import RunPaths
from vitladder.training.checkpoint_io import saves_in

RUNG = "epochs200"
SETTINGS = {"eager": False, "compiled": True}  # name -> speed.compile
TARGETS = {"images_per_s_min": 25_000, "images_per_s_aim": 50_000}  # full model, one H200 (200 epochs < 6 min)
RESERVE_S = 30.0  # kept after training: test, analysis, model, figures, report
EPOCH_OVERHEAD_S = 0.3  # per epoch beyond its steps: loop hooks, metrics, CSV row, attention tracking
RUN_START_S = 5.0  # train_rung before its first step: the data cache, the trainer, moving the data to the device
COMPILE_REUSE = 0.6  # a compiled run pays this share of the benchmark's compile (its train graph is cached)


@dataclass(frozen=True)
class CheckOptions:
    out: Path
    budget_s: float = 480.0
    data: str = "synthetic"  # "synthetic" or a folder / archive of train/ and test/
    smoke: bool = False
    settings: tuple[str, ...] = tuple(SETTINGS)
    overrides: tuple[str, ...] = ()  # more Hydra overrides for every config of the check


def compose(options: CheckOptions, *extra: str) -> DictConfig:
    """The top rung's config for the check: the full profile (or smoke), one device, no W&B; checkpoints as the
    profile saves them."""
    data = ["data=synthetic"] if options.data == "synthetic" else ["data=imagefolder", f"data.root={options.data}"]
    profile = ["profile=smoke"] if options.smoke else []
    run = ["trainer.devices=1", "trainer.enable_progress_bar=false", "wandb.mode=disabled", "ladder=gpu-check"]
    return compose_rung(RUNG, [*profile, *data, *run, f"run_dir={options.out / RUNG}", *options.overrides, *extra])


def epoch_seconds(images_per_s: float, num_train: int, num_val: int) -> float:
    """One epoch, training and validation, at ``images_per_s`` training images a second."""
    return (num_train + EVAL_COST * num_val) / images_per_s + EPOCH_OVERHEAD_S


def plan_epochs(
    seconds: float,
    images_per_s: float,
    num_train: int,
    num_val: int,
    max_epochs: int,
    checkpoint: tuple[float, int, float] = (0.0, 1, 0.0),
) -> int:
    """Whole epochs (train + validation) that fit into ``seconds`` at ``images_per_s``, with the checkpoints they
    save (``checkpoint``: seconds a save, checkpoint.every_n_epochs, checkpoint.min_interval_s); at least 1."""
    epoch_s = epoch_seconds(images_per_s, num_train, num_val)
    save_s, every_n, interval_s = checkpoint
    epochs = max(1, min(max_epochs, int(seconds / epoch_s)))
    while epochs > 1 and epochs * epoch_s + saves_in(epochs, epoch_s, every_n, interval_s) * save_s > seconds:
        epochs -= 1
    return epochs


def max_time(seconds: float) -> str:
    """``trainer.max_time`` as DD:HH:MM:SS, at least one second."""
    days, rest = divmod(max(1, int(seconds)), 86_400)
    return f"{days:02d}:{time.strftime('%H:%M:%S', time.gmtime(rest))}"


def choose(measured: dict[str, dict]) -> str:
    """The setting that trains the most epochs in the budget; the faster one when they tie."""
    return max(measured, key=lambda name: (measured[name]["epochs_in_budget"], measured[name]["images_per_s"]))


def benchmark(options: CheckOptions, left: Callable[[], float], device: str, log: Callable[[str], None]):
    """(each benchmarked setting's figures, the settings skipped with why, the loop's host syncs and checkpoint cost,
    the training and validation images); ``left()``: the seconds left of the budget."""
    measured: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    cfg = compose(options)
    warmup, steps = (10, 40) if device == "cuda" else (3, 10)
    width = ("tiny" if options.smoke else "full", int(cfg.model.embed_dim))
    s = BenchSettings(*width, device, int(cfg.data.batch_size), warmup, steps, rounds=1, rung=RUNG)
    datamodule = bench_data(cfg, s)
    no_compiler = device == "cpu" and not any(shutil.which(c) for c in ("g++", "c++", "clang++"))  # for inductor
    for name in options.settings:
        started, compiled, left_s = time.perf_counter(), SETTINGS[name], left()
        reason = None
        if compiled and no_compiler:
            reason = "no C++ compiler for inductor's CPU kernels"
        elif compiled and left_s < 0.4 * options.budget_s:
            reason = f"{left_s:.0f} s left of the budget: no time to compile"
        else:
            try:
                step_s = time_project(compose(options, f"speed.compile={str(compiled).lower()}"), datamodule, s)
            except Exception as error:  # noqa: BLE001 - one failed setting (a compiler error, say) must not end the check
                if not measured and name == options.settings[-1]:
                    raise
                reason = f"failed: {type(error).__name__}: {first_line(error)}"
        if reason:
            skipped[name] = reason
            log(f"benchmark {name}: skipped ({reason})")
            continue
        startup = max(0.0, time.perf_counter() - started - (warmup + steps + 1) * step_s)  # trainer, data, compile
        measured[name] = {"images_per_s": round(s.batch_size / step_s, 1), "step_ms": round(1e3 * step_s, 3)}
        measured[name]["startup_s"] = round(startup, 1)
        log(
            f"benchmark {name}: {s.batch_size / step_s:,.0f} images/s ({1e3 * step_s:.1f} ms a step of "
            f"{s.batch_size}), {startup:.1f} s to start"
        )
    if not measured:
        raise UserError(f"no setting could be benchmarked ({'; '.join(f'{k}: {v}' for k, v in skipped.items())})")
    # Eager: the syncs are the loop's, and a checkpoint is the same compiled or not.
    loop = time_loop_costs(cfg, datamodule, replace(s, warmup=2, steps=3), options.out)
    cuda = f", CUDA {loop['cuda_syncs_per_step']}" if loop["cuda_syncs_per_step"] else ""
    log(
        f"loop: host syncs per step {loop['host_syncs_per_step']}{cuda}; last.ckpt {loop['checkpoint_mib']:.0f} MiB "
        f"written and fsynced in {loop['checkpoint_s']:.2f} s"
    )
    return measured, skipped, loop, (len(datamodule.train.labels), len(datamodule.val.labels))


def run_check(options: CheckOptions, log: Callable[[str], None] = print) -> dict:
    """Benchmark, train within the budget, analyse, report; returns what gpu_check.json holds, which each phase
    rewrites when it ends, failed or not."""
    started = time.perf_counter()
    base = compose(options)
    device = "cuda" if on_cuda(base.trainer.accelerator) else "cpu"
    if device == "cpu" and not options.smoke:
        raise UserError("no CUDA device is visible: run this on a GPU machine, or --smoke for the CPU rehearsal")
    info = machine(device)
    choices = {"fused_adamw": fused_adamw(base), "tf32": run_choices(base).tf32}  # what the run takes (cuda_choices)
    precision, batch = str(base.trainer.precision), int(base.data.batch_size)
    result = {"device": info.pop("device_name"), "device_type": device, **info, "smoke": options.smoke}
    result |= {"budget_s": options.budget_s, "precision": precision, **choices, "batch_size": batch}
    result |= {"width": int(base.model.embed_dim), "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])}
    result["phases_s"] = {}

    def left() -> float:
        return options.budget_s - (time.perf_counter() - started)

    @contextmanager
    def phase(name: str) -> Iterator[None]:
        since = time.perf_counter()
        try:
            yield
        except Exception as error:
            failed = result.setdefault("failed", {"phase": name})  # training's says whether it got to the analysis
            failed["error"] = f"{type(error).__name__}: {first_line(error)}"
            raise
        finally:
            result["phases_s"][name] = round(time.perf_counter() - since, 1)
            result["wall_s"] = round(time.perf_counter() - started, 1)
            write_json(options.out / "gpu_check.json", result)

    with phase("benchmark"):
        measured, skipped, loop, (num_train, num_val) = benchmark(options, left, device, log)
        fastest = max(measured, key=lambda name: measured[name]["images_per_s"])
        best = {"setting": fastest, "images_per_s": measured[fastest]["images_per_s"], "compile": SETTINGS[fastest]}
        result |= {"benchmark": measured, "skipped": skipped, "best": {**best, "precision": precision, **choices}}
        result["targets"] = {**TARGETS, "met": measured[fastest]["images_per_s"] >= TARGETS["images_per_s_min"]}
        result |= {key: loop[key] for key in ("host_syncs_per_step", "cuda_syncs_per_step")}

    # Epochs per setting from what is left, less the run's start-up (and its compile), the reserve after it, and the
    # checkpoints they save at the profile's interval.
    full_epochs, train_s = scaled_epochs(base)[0], left() - RESERVE_S
    every_n, interval_s = int(base.checkpoint.every_n_epochs), float(base.checkpoint.min_interval_s)
    checkpoint = (loop["checkpoint_s"], every_n, interval_s)
    for name, m in measured.items():
        left_s = train_s - RUN_START_S - (COMPILE_REUSE * m["startup_s"] if SETTINGS[name] else 0.0)
        m["epochs_in_budget"] = plan_epochs(left_s, m["images_per_s"], num_train, num_val, full_epochs, checkpoint)
    setting = choose(measured)
    epochs = measured[setting]["epochs_in_budget"]
    epoch_s = epoch_seconds(measured[setting]["images_per_s"], num_train, num_val)
    saves = saves_in(epochs, epoch_s, every_n, interval_s)
    log(f"training {RUNG}: {epochs} of {full_epochs} epochs, {setting}, {saves} checkpoints, within {train_s:.0f} s")
    result["checkpoint"] = {"save_s": round(loop["checkpoint_s"], 3), "mib": round(loop["checkpoint_mib"], 1)}
    result["checkpoint"] |= {"every_n_epochs": every_n, "min_interval_s": interval_s, "saves_planned": saves}
    result["checkpoint"]["share_of_training_planned"] = round(saves * loop["checkpoint_s"] / (epochs * epoch_s), 4)
    train = {"rung": RUNG, "setting": setting, "epochs_planned": epochs, "epochs_of_recipe": full_epochs}
    train |= {"max_time": max_time(train_s), "steps_planned": epochs * (num_train // batch), "source": options.data}
    train |= {"train_images": num_train, "val_images": num_val}
    result["train"] = train  # the training phase adds what it trained

    cfg = compose(
        options,
        f"speed.compile={str(SETTINGS[setting]).lower()}",
        f"profile.epoch_scale={epochs / int(base.optim.epochs)}",  # the schedule shortened to fit
        f"trainer.max_time={max_time(train_s)}",
    )
    paths = RunPaths(Path(cfg.run_dir))
    with phase("train_test_analyse"):
        try:
            summary = train_rung(cfg)
        except Exception:
            train |= trained_so_far(paths)
            result["failed"] = {"phase": "analysis" if "test_acc" in train else "training"}
            raise
        # epochs_trained: a fraction where max_time stopped the last epoch part way; the warmup shortened with the rest
        train |= {"epochs_trained": summary["epochs"], "steps_trained": summary["steps"], "data": summary["data"]}
        train |= {"steps_planned": epochs * summary["steps_per_epoch"], "test_images": summary["test_images"]}
        train |= {"warmup_epochs": scaled_epochs(cfg)[1], "warmup_epochs_of_recipe": scaled_epochs(base)[1]}
        shown = ("distance_px", "distance_drop_px", "entropy_nats")
        rows = read_csv(paths.layers_csv)
        layers = [{"layer": int(row["layer"]), **{k: float(row[k]) for k in shown}} for row in rows]
        scalars = ("layer1_distance_px", "uniform_distance_px", "layer1_entropy_nats", "layer1_distance_drop_px")
        result |= {"test_acc": summary["test_acc"], "val_acc": summary["val_acc"]}
        result["analysis"] = {"images": summary.get("analysis_images"), "analysed": analysed(summary), "layers": layers}
        result["analysis"] |= {key: summary.get(key) for key in (*scalars, "uniform_distance_drop_px")}
        reference = get_rung(RUNG).reference  # the article's figures for the checked rung (conf/step/)
        result["reference"] = {key: reference[key] for key in ("test_acc", "epochs", "layer1_distance_px")}
        result["differs"] = differences(summary, reference["epochs"])  # from the article's setting, in words

    with phase("report"):
        report = build_report(options.out)  # report.md, ladder.csv, distance_by_layer.png, entropy_by_layer.png
    write_text(options.out / "gpu_check.md", markdown(result, report.name))
    return result


def first_line(error: BaseException) -> str:
    return (str(error).strip() or "-").splitlines()[0][:200]


def trained_so_far(paths: RunPaths) -> dict:
    """What a run that stopped with an error left in its metrics.csv: epochs validated, the last val/acc, and
    test/acc if it got that far."""
    rows = read_csv(paths.metrics_csv) if paths.metrics_csv.exists() else []
    validated = [row for row in rows if row.get("val/acc")]
    tested = [row for row in rows if row.get("test/acc")]
    return {
        "epochs_trained": int(float(validated[-1]["epoch"])) if validated else 0,
        **({"val_acc": float(validated[-1]["val/acc"])} if validated else {}),
        **({"test_acc": float(tested[-1]["test/acc"])} if tested else {}),
        "checkpoint_kept": paths.last_ckpt.exists(),
    }


def markdown(r: dict, report_name: str) -> str:
    """The short human summary of gpu_check.json."""
    t, a, c, syncs = r["train"], r["analysis"], r["checkpoint"], r["host_syncs_per_step"]
    cuda, fastest = r["cuda_syncs_per_step"], r["best"]["setting"]
    cuda = f" (CUDA's sync debug mode: {cuda['train']:g}, {cuda['eval']:g})" if cuda else ""
    slower = (
        f" The run below trains {t['setting']}: more of its epochs fit the budget." if t["setting"] != fastest else ""
    )
    schedule = "the recipe's whole schedule"
    if t["epochs_planned"] != t["epochs_of_recipe"]:
        schedule = (
            f"the recipe's {t['epochs_of_recipe']}-epoch schedule shortened to fit, warmup included: "
            f"{t['warmup_epochs']:g} warmup epochs, not {t['warmup_epochs_of_recipe']:g}"
        )
    blocks = [
        f"# GPU check{' (CPU rehearsal, smoke width)' if r['smoke'] else ''}: {r['device']}",
        f"torch {r['torch']} (CUDA {r['cuda']}), lightning {r['lightning']}, timm {r['timm']}, Python {r['python']}; "
        f"budget {r['budget_s']:.0f} s, wall {r['wall_s']:.0f} s; `{r['command']}`",
        f"Training step of the `{t['rung']}` model (width {r['width']}, batch {r['batch_size']}, {r['precision']}, "
        f"fused AdamW {'on' if r['fused_adamw'] else 'off'}, TF32 {'on' if r['tf32'] else 'off'}):",
        "| setting | images/s | ms/step | start-up s | epochs in budget |\n|---|---|---|---|---|\n"
        + "\n".join(
            f"| {name} | {m['images_per_s']:,.0f} | {m['step_ms']:.1f} | {m['startup_s']:.0f} | "
            f"{m['epochs_in_budget']} |"
            for name, m in r["benchmark"].items()
        ),
        f"Fastest: **{fastest}**, {r['best']['images_per_s']:,.0f} images/s (target "
        f"{r['targets']['images_per_s_min']:,}, aim {r['targets']['images_per_s_aim']:,}: "
        f"{'met' if r['targets']['met'] else 'not met'}).{slower}",
        f"Host syncs per step: training {syncs['train']:g}, evaluation {syncs['eval']:g}{cuda} (0 is the aim). "
        f"`last.ckpt` ({c['mib']:.0f} MiB) written and fsynced in {c['save_s']:.2f} s; at the profile's interval "
        f"(an epoch end once {c['min_interval_s']:g} s have passed, and the last) {c['saves_planned']} saves, "
        f"{c['share_of_training_planned']:.1%} of the training planned.",
        f"`{t['rung']}` trained {epochs_text({'epochs': t['epochs_trained']})} of the {t['epochs_planned']} epochs "
        f"that fit the budget ({t['steps_trained']:,} of {t['steps_planned']:,} optimizer steps, {t['setting']}; "
        f"{schedule}) on {t['train_images']:,} training images of {t['data']} (`{t['source']}`): "
        f"test accuracy **{r['test_acc']:.1%}** over {t['test_images']:,} test images; layer-1 distance "
        f"**{a['layer1_distance_px']:.1f} px** (uniform {a['uniform_distance_px']:.1f} px; CLS dropped: "
        f"{a['layer1_distance_drop_px']:.1f} px, uniform {a['uniform_distance_drop_px']:.2f} px) over "
        f"{a['analysed']} test images.",
        comparison(r),
        "| layer | distance (px) | distance, CLS dropped (px) | entropy (nats) |\n|---|---|---|---|\n"
        + "\n".join(
            f"| {row['layer']} | {row['distance_px']:.2f} | {row['distance_drop_px']:.2f} | {row['entropy_nats']:.3f} |"
            for row in a["layers"]
        ),
        "![distance per layer](distance_by_layer.png)",
        f"Phases (s): {', '.join(f'{k} {v:.0f}' for k, v in r['phases_s'].items())}. "
        f"Every figure: `gpu_check.json`; the run: `{t['rung']}/`; its report: `{report_name}`.",
    ]
    return "\n\n".join(blocks) + "\n"


def comparison(r: dict) -> str:
    """Whether the check's run can be read beside the article's figures, and if not, why."""
    ref, t = r["reference"], r["train"]
    figures = f"{ref['test_acc']:.1%} and {ref['layer1_distance_px']} px after {ref['epochs']} epochs"
    differs = [*r["differs"], *(["a shortened schedule"] if t["epochs_planned"] < t["epochs_of_recipe"] else [])]
    if not differs:
        return f"The article's setting: its figures, {figures}, compare directly."
    return (
        f"**Not the article's setting, so not comparable with its figures** ({figures}): "
        + "; ".join(differs)
        + ". This check measures the machine; the ladder (`make ladder`) is what reproduces the article."
    )
