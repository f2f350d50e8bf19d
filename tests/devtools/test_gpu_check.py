"""The prepared GPU check: its CPU rehearsal (`scripts/gpu_check.py --smoke`) writes every file, the wheels carried
to the GPU machine cover every import it makes that the machine lacks, and its planning and mistakes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from importlib.metadata import PackageNotFoundError, packages_distributions, requires
from pathlib import Path

import pytest
from entry_points import load_script
from packaging.requirements import Requirement

from vitladder.devtools import gpu_check
from vitladder.devtools.floors import dependencies
from vitladder.devtools.gpu_check import RESERVE_S, CheckOptions, choose, markdown, max_time, plan_epochs
from vitladder.run_folder import RunPaths

# Records, at exit, every module the process imported.
MODULE_DUMP = textwrap.dedent(
    """
    import atexit, os, sys

    def _dump():
        with open(os.environ["VITLADDER_TEST_MODULES"], "w") as f:
            f.write("\\n".join(sorted(sys.modules)))

    atexit.register(_dump)
    """
)
# The GPU machine: Python 3.12 on Linux x86_64 (for the environment markers of requirements).
GPU_MACHINE = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "os_name": "posix",
    "extra": "",
}
SMOKE_BUDGET = 60


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def listed(path: Path) -> set[str]:
    """Distribution names of a requirements-style file (comments and pins dropped)."""
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return {normalise(Requirement(line).name) for line in lines if line}


def run_check(repo_root: Path, tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(MODULE_DUMP)
    modules = tmp_path / "modules.txt"
    env = {key: value for key, value in os.environ.items() if not key.startswith("WANDB_")}  # the check's own: off
    env.update(
        VITLADDER_TEST_MODULES=str(modules),
        PYTHONPATH=os.pathsep.join([str(hooks), str(repo_root / "src"), os.environ.get("PYTHONPATH", "")]),
    )
    result = subprocess.run(
        [sys.executable, str(repo_root / "scripts" / "gpu_check.py"), *args],
        cwd=repo_root,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    return result, modules.read_text().split() if modules.exists() else []


@pytest.fixture(scope="module")
def smoke(repo_root, tmp_path_factory):
    """One CPU rehearsal on synthetic data with a small budget: (output folder, result, imported modules, wall s)."""
    tmp_path = tmp_path_factory.mktemp("gpu_check")
    out = tmp_path / "out"
    started = time.perf_counter()
    args = f"--smoke --data synthetic --settings eager --budget {SMOKE_BUDGET} --out {out}"
    overrides = ("data.train_subset=1000", "data.test_subset=200", "analysis.num_images=50")
    result, modules = run_check(repo_root, tmp_path, *args.split(), *overrides)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return out, json.loads((out / "gpu_check.json").read_text()), modules, time.perf_counter() - started


def test_the_cpu_rehearsal_benchmarks_trains_analyses_and_writes_its_files(smoke):
    out, result, _, _ = smoke
    for name in ("gpu_check.json", "gpu_check.md", "distance_by_layer.png", "report.md"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    assert result["smoke"] and result["device_type"] == "cpu" and result["width"] == 48
    eager = result["benchmark"]["eager"]
    assert eager["images_per_s"] > 0 and eager["step_ms"] > 0 and result["best"]["setting"] == "eager"
    assert result["best"]["compile"] is False and result["best"]["precision"] == "32-true"
    train = result["train"]
    assert train["rung"] == "epochs200" and train["epochs_of_recipe"] == 2  # the smoke profile's 1% of 200
    # Epochs in optimizer steps: on a busy CPU, max_time may stop the first epoch part way (a fraction of one).
    assert 0 < train["epochs_trained"] <= train["epochs_planned"] <= 2 and train["train_images"] == 1000
    assert train["epochs_trained"] == pytest.approx(train["steps_trained"] / (1000 // 64), abs=0.005)
    assert 1 <= train["steps_trained"] <= train["steps_planned"] == train["epochs_planned"] * (1000 // 64)
    assert 0.0 <= result["test_acc"] <= 1.0
    layers = result["analysis"]["layers"]
    assert [row["layer"] for row in layers] == list(range(7)) and result["analysis"]["images"] == 50
    assert all(0 < row["distance_px"] < 2 * result["analysis"]["uniform_distance_px"] for row in layers)
    assert result["analysis"]["layer1_distance_px"] == pytest.approx(layers[1]["distance_px"], abs=1e-5)
    done = json.loads((out / "epochs200" / "done.json").read_text())
    assert done["test_acc"] == result["test_acc"] and done["epochs"] == train["epochs_trained"]
    assert not (out / "epochs200" / "wandb").exists(), "W&B is off in the check"
    markdown = (out / "gpu_check.md").read_text()
    assert f"{result['test_acc']:.1%}" in markdown and "distance_by_layer.png" in markdown
    # What it is, in words: synthetic images, 1,000 training images, a seeded sample of 50 analysed.
    assert "Not the article's setting" in markdown and "synthetic images, not the official pixels" in markdown
    assert "1,000 training images, not 50,000" in markdown and "a seeded sample of 50 test images" in markdown
    assert train["data"] == "synthetic images" and result["analysis"]["analysed"] == "a seeded sample of 50"


def test_the_check_saves_checkpoints_as_the_profile_does_and_counts_their_cost(smoke):
    out, result, _, _ = smoke
    checkpoint = result["checkpoint"]
    assert checkpoint["min_interval_s"] == 0 and checkpoint["every_n_epochs"] == 1  # the smoke profile's
    assert 0 < checkpoint["save_s"] < 10 and 1 < checkpoint["mib"] < 10  # weights and AdamW state at width 48
    assert checkpoint["saves_planned"] == result["train"]["epochs_planned"]  # every epoch, at this interval
    assert 0 < checkpoint["share_of_training_planned"] < 1
    assert (out / "epochs200" / "checkpoints" / "last.ckpt").is_file(), "the run saves as a user's would"
    assert not list(out.glob(".bench-checkpoint-*")), "the timed checkpoint is removed"
    assert result["host_syncs_per_step"]["train"] == 0 and result["cuda_syncs_per_step"] is None
    assert "Host syncs per step" in (out / "gpu_check.md").read_text()


def test_the_cpu_rehearsal_keeps_to_its_budget(smoke):
    _, result, _, wall = smoke
    assert wall < 180, "the rehearsal takes under 3 minutes"
    # Training is stopped at what the benchmark left of the budget, less the reserve for test, analysis and report.
    days, hours, minutes, seconds = map(int, result["train"]["max_time"].split(":"))
    benchmark_s = result["phases_s"]["benchmark"]
    assert 0 < ((days * 24 + hours) * 60 + minutes) * 60 + seconds <= max(1, SMOKE_BUDGET - benchmark_s - RESERVE_S + 1)
    assert set(result["phases_s"]) == {"benchmark", "train_test_analyse", "report"}


def distributions_of(modules: list[str]) -> set[str]:
    """The installed distributions that provide the top-level packages of ``modules`` (this project excluded)."""
    providers = packages_distributions()
    tops = {name.split(".")[0] for name in modules} - set(sys.stdlib_module_names)
    return {normalise(dist) for top in tops for dist in providers.get(top, [])} - {"vitladder"}


def test_the_carried_wheels_cover_every_import_the_check_makes_that_the_gpu_machine_lacks(smoke, repo_root):
    _, _, modules, _ = smoke
    imported = distributions_of(modules)
    assert {"torch", "lightning", "timm", "hydra-core", "omegaconf"} <= imported  # the dump is real
    preinstalled = listed(repo_root / "gpu" / "preinstalled.txt")
    carried = listed(repo_root / "gpu" / "requirements.txt")
    missing = sorted(imported - preinstalled - carried)
    assert not missing, f"imported by the check, not on the GPU machine, not in gpu/requirements.txt: {missing}"


def test_the_carried_wheels_need_nothing_the_gpu_machine_lacks(repo_root):
    # Installed there with --no-deps: every requirement of a carried wheel must be carried or already there.
    preinstalled = listed(repo_root / "gpu" / "preinstalled.txt")
    carried = listed(repo_root / "gpu" / "requirements.txt")
    unmet = {}
    for dist in sorted(carried):
        try:
            needs = requires(dist) or []
        except PackageNotFoundError:
            pytest.fail(f"{dist} (gpu/requirements.txt) is not installed here, so its requirements cannot be checked")
        for spec in needs:
            requirement = Requirement(spec)
            if requirement.marker is None or requirement.marker.evaluate(GPU_MACHINE):
                if normalise(requirement.name) not in preinstalled | carried:
                    unmet.setdefault(dist, []).append(requirement.name)
    assert not unmet, f"requirements neither carried nor on the GPU machine: {unmet}"


def test_make_gpu_check_installs_the_wheels_offline_and_runs_the_check(repo_root):
    dry_run = subprocess.run(
        ["make", "-n", "gpu-check", "BUDGET=300", "GPU_OUT=out/check", "ARGS=seed=1"],
        cwd=repo_root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    install = next(line for line in dry_run.splitlines() if "pip install" in line)
    for flag in ("--no-index", "--no-deps", "--target gpu/site", "gpu/wheels/*.whl"):
        assert flag in install
    check = dry_run[dry_run.index("PYTHONPATH=src:gpu/site") :]
    assert "scripts/gpu_check.py --budget 300" in check and "--out out/check" in check and "seed=1" in check


def test_epochs_fit_the_time_left():
    # 45,000 + 5,000 / 3 image-equivalents an epoch at 50,000 images/s: 0.933 s + 0.3 s of overhead = 1.233 s.
    assert plan_epochs(100.0, 50_000, 45_000, 5_000, 200) == 81
    assert plan_epochs(300.0, 50_000, 45_000, 5_000, 200) == 200  # 243 fit: capped at the recipe's 200
    assert plan_epochs(5.0, 100, 45_000, 5_000, 200) == 1  # at least one epoch
    assert max_time(3725.9) == "00:01:02:05" and max_time(0.2) == "00:00:00:01"


def test_the_epochs_planned_leave_time_for_their_checkpoints():
    # 3 s a save: every epoch (1.233 + 3 s) leaves 23 epochs of 100 s; one a minute saves after epoch 49 and the
    # last, so 76 epochs (93.7 s) and 2 saves (6 s) fit.
    assert plan_epochs(100.0, 50_000, 45_000, 5_000, 200, checkpoint=(3.0, 1, 0.0)) == 23
    assert plan_epochs(100.0, 50_000, 45_000, 5_000, 200, checkpoint=(3.0, 1, 60.0)) == 76
    assert plan_epochs(100.0, 50_000, 45_000, 5_000, 200, checkpoint=(3.0, 0, 60.0)) == 81  # no checkpoints


def test_the_check_does_not_turn_checkpoints_off(tmp_path):
    cfg = gpu_check.compose(CheckOptions(out=tmp_path))
    assert cfg.checkpoint.every_n_epochs == 1 and cfg.checkpoint.min_interval_s == 60  # the full profile's


@pytest.fixture
def measured_benchmark(monkeypatch, tmp_path):
    """The check's benchmark replaced by its figures: what run_check does after it, in a second."""
    loop = {
        "host_syncs_per_step": {"train": 0.0, "eval": 0.0},
        "cuda_syncs_per_step": None,
        "checkpoint_s": 0.05,
        "checkpoint_mib": 2.4,
    }
    eager = {"images_per_s": 900.0, "step_ms": 70.0, "startup_s": 1.0}
    monkeypatch.setattr(
        gpu_check, "benchmark", lambda options, clock, device, log: ({"eager": eager}, {}, loop, (1000, 1000))
    )
    return CheckOptions(out=tmp_path / "out", budget_s=60, smoke=True)


def failing_run(metrics: str):
    def train_rung(cfg):
        paths = RunPaths(Path(cfg.run_dir))
        paths.metrics_csv.parent.mkdir(parents=True)
        paths.metrics_csv.write_text(metrics)
        raise RuntimeError("the GPU fell off the bus")

    return train_rung


@pytest.mark.parametrize(
    "metrics, phase",
    [
        ("epoch,step,val/acc\n1,15,0.25\n", "training"),
        ("epoch,step,val/acc,test/acc\n2,31,0.5,\n2,31,,0.45\n", "analysis"),
    ],
)
def test_a_crash_keeps_what_was_measured_before_it(measured_benchmark, monkeypatch, metrics, phase):
    monkeypatch.setattr(gpu_check, "train_rung", failing_run(metrics))
    with pytest.raises(RuntimeError, match="fell off the bus"):
        gpu_check.run_check(measured_benchmark, log=lambda _: None)
    kept = json.loads((measured_benchmark.out / "gpu_check.json").read_text())
    assert kept["benchmark"]["eager"]["images_per_s"] == 900.0 and kept["checkpoint"]["save_s"] == 0.05
    assert kept["failed"] == {"phase": phase, "error": "RuntimeError: the GPU fell off the bus"}
    assert kept["train"]["epochs_planned"] >= 1 and kept["phases_s"]["benchmark"] >= 0
    assert kept["train"]["epochs_trained"] == (1 if phase == "training" else 2)
    assert kept["train"].get("test_acc") == (None if phase == "training" else 0.45)


def test_a_failed_benchmark_says_so_in_the_json(monkeypatch, tmp_path):
    def no_setting(options, left, device, log):
        raise gpu_check.UserError("no setting could be benchmarked (eager: failed)")

    monkeypatch.setattr(gpu_check, "benchmark", no_setting)
    options = CheckOptions(out=tmp_path / "out", budget_s=60, smoke=True)
    with pytest.raises(gpu_check.UserError):
        gpu_check.run_check(options, log=lambda _: None)
    kept = json.loads((options.out / "gpu_check.json").read_text())
    assert kept["failed"] == {
        "phase": "benchmark",
        "error": "UserError: no setting could be benchmarked (eager: failed)",
    }
    assert set(kept["phases_s"]) == {"benchmark"} and kept["device_type"] == "cpu"


def test_the_versions_and_their_warnings_come_before_an_old_library_can_crash_the_check(repo_root, tmp_path):
    # A timm older than the floor whose import fails, as timm 0.9 fails on `timm.layers.attention`.
    old = tmp_path / "old"
    (old / "timm").mkdir(parents=True)
    (old / "timm" / "__init__.py").write_text("raise ImportError('an old timm')\n")
    (old / "timm-0.9.2.dist-info").mkdir()
    (old / "timm-0.9.2.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: timm\nVersion: 0.9.2\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(old), str(repo_root / "src")])}
    result = subprocess.run(
        [sys.executable, "scripts/gpu_check.py", "--smoke", "--out", str(tmp_path / "out")],
        cwd=repo_root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0 and "an old timm" in result.stderr
    assert "timm 0.9.2" in result.stdout.splitlines()[0] and "torch " in result.stdout
    (timm,) = (Requirement(s) for s in dependencies(repo_root / "pyproject.toml") if Requirement(s).name == "timm")
    warning = f"warning: timm 0.9.2 is outside {timm.specifier} (pyproject.toml)"
    assert result.stderr.index(warning) < result.stderr.index("an old timm"), result.stderr[-2000:]


def test_the_setting_that_trains_longest_is_chosen():
    eager = {"images_per_s": 30_000, "step_ms": 17, "startup_s": 5.0, "epochs_in_budget": 150}
    compiled = {"images_per_s": 45_000, "step_ms": 11, "startup_s": 60.0, "epochs_in_budget": 180}
    assert choose({"eager": eager, "compiled": compiled}) == "compiled"
    compiled["epochs_in_budget"] = 140  # its compile eats more time than its speed gives back
    assert choose({"eager": eager, "compiled": compiled}) == "eager"
    eager["epochs_in_budget"] = compiled["epochs_in_budget"] = 200  # both fit the whole recipe: the faster one
    assert choose({"eager": eager, "compiled": compiled}) == "compiled"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--data", "synthetic"], "no CUDA device is visible"),
        (["--smoke", "--data", "nowhere/cifar.tar.xz"], "no CIFAR-10 at nowhere/cifar.tar.xz"),
        (["--smoke", "--settings", "fast"], "--settings 'fast': choose from eager, compiled"),
        (["--smoke", "--budget", "0"], "--budget 0.0"),
    ],
)
def test_mistakes_are_one_line_and_write_nothing(repo_root, tmp_path, capsys, args, message):
    if "CUDA" in message:
        import torch

        if torch.cuda.is_available():
            pytest.skip("a GPU is here")
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        load_script("gpu_check").main([*args, "--out", str(out)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1 and message in err
    assert not out.exists()


def test_an_output_folder_with_files_is_refused(repo_root, tmp_path, capsys):
    (tmp_path / "gpu_check.json").write_text("{}")
    with pytest.raises(SystemExit):
        load_script("gpu_check").main(["--smoke", "--out", str(tmp_path)])
    assert "already holds files" in capsys.readouterr().err


def test_missing_packages_name_the_wheels(repo_root, capsys, monkeypatch):
    script = load_script("gpu_check")
    monkeypatch.setitem(script.NEEDED, "vitladder_no_such_module", "hydra-core")
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--smoke"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "hydra-core not importable" in err and "gpu/wheels" in err


def a_gpu_result(**train) -> dict:
    """gpu_check.json of a 480-s check on an H200: 37 of 200 epochs fitted the budget, and max_time stopped the
    38th after 36 of its 87 steps; CIFAR-10's JPEG copy (the figures are made up, the layout is run_check's)."""
    return {
        "smoke": False,
        "device": "NVIDIA H200",
        "torch": "2.9.0",
        "cuda": "12.8",
        "lightning": "2.6.0",
        "timm": "1.0.20",
        "python": "3.12.3",
        "budget_s": 480,
        "wall_s": 478,
        "command": "gpu_check.py --budget 480",
        "width": 384,
        "batch_size": 512,
        "precision": "bf16-mixed",
        "fused_adamw": True,
        "tf32": True,
        "benchmark": {"compiled": {"images_per_s": 40_000, "step_ms": 12.8, "startup_s": 60, "epochs_in_budget": 38}},
        "host_syncs_per_step": {"train": 0, "eval": 0},
        "cuda_syncs_per_step": None,
        "checkpoint": dict(mib=143, save_s=0.45, min_interval_s=60, saves_planned=7, share_of_training_planned=0.008),
        "best": {"setting": "compiled", "images_per_s": 40_000},
        "targets": {"images_per_s_min": 25_000, "images_per_s_aim": 50_000, "met": True},
        "train": {
            "rung": "epochs200",
            "setting": "compiled",
            "epochs_planned": 38,
            "epochs_of_recipe": 200,
            "epochs_trained": 37.41,
            "warmup_epochs": 0.95,
            "warmup_epochs_of_recipe": 5.0,
            "steps_planned": 3306,
            "steps_trained": 3255,
            "source": "gpu/data/cifar10-jpeg.tar.xz",
            "data": "the JPEG copy of CIFAR-10",
            "train_images": 45_000,
            "test_images": 10_000,
            **train,
        },
        "test_acc": 0.85,
        "analysis": {
            "analysed": "a seeded sample of 1,000",
            "layers": [dict(layer=k, distance_px=10.0, distance_drop_px=9.5, entropy_nats=3.0) for k in range(7)],
            "layer1_distance_px": 10.0,
            "uniform_distance_px": 16.546,
            "layer1_distance_drop_px": 9.5,
            "uniform_distance_drop_px": 16.291,
        },
        "reference": {"test_acc": 0.929, "epochs": 200, "layer1_distance_px": 8.1},
        "differs": [
            "37.41 (the last one partial) of 200 epochs",
            "the JPEG copy of CIFAR-10, not the official pixels",
            "45,000 training images, not 50,000",
            "attention over a seeded sample of 1,000 test images, not the official first 1,000",
        ],
        "phases_s": {"benchmark": 90, "train_test_analyse": 380, "report": 8},
    }


def test_the_summary_says_when_the_run_trains_a_slower_setting() -> None:
    result = a_gpu_result()
    assert "Fastest: **compiled**, 40,000 images/s (target 25,000, aim 50,000: met).\n" in markdown(result, "r.md")
    result["benchmark"]["eager"] = {"images_per_s": 30_000, "step_ms": 17.1, "startup_s": 4, "epochs_in_budget": 40}
    result["train"]["setting"] = "eager"  # compiling took longer than its faster steps gave back
    assert "met). The run below trains eager: more of its epochs fit the budget.\n" in markdown(result, "r.md")


def test_the_check_never_reads_as_the_articles_table() -> None:
    text = markdown(a_gpu_result(), "report.md")
    trained = next(line for line in text.splitlines() if line.startswith("`epochs200` trained"))
    assert "37.41 (the last one partial) of the 38 epochs" in trained and "3,255 of 3,306 optimizer steps" in trained
    assert "200-epoch schedule shortened to fit, warmup included: 0.95 warmup epochs, not 5" in trained
    assert "the JPEG copy of CIFAR-10" in trained and "over a seeded sample of 1,000 test images" in trained
    assert "CLS dropped: 9.5 px, uniform 16.29 px" in trained
    verdict = next(line for line in text.splitlines() if "92.9%" in line)
    assert verdict.startswith("**Not the article's setting, so not comparable with its figures** (92.9% and 8.1 px")
    for words in (*a_gpu_result()["differs"], "a shortened schedule"):
        assert words in verdict
    # The article's setting (a whole run of 200 epochs on the official pixels) says it compares.
    whole = {**a_gpu_result(), "differs": []}
    whole["train"] = {**whole["train"], "epochs_planned": 200, "epochs_trained": 200}
    assert "The article's setting: its figures, 92.9% and 8.1 px after 200 epochs, compare directly." in markdown(
        whole, "report.md"
    )


@pytest.fixture
def fake_timings(monkeypatch):
    """gpu_check.benchmark with the timings faked: a step of 10 ms eager, and compiled either 5 ms or the error
    ``failures["compiled"]``; no data loaded."""
    failures: dict[str, Exception] = {}

    def time_project(cfg, datamodule, s):
        name = "compiled" if cfg.speed.compile else "eager"
        if name in failures:
            raise failures[name]
        return 0.005 if cfg.speed.compile else 0.010

    splits = type(
        "Splits", (), {"train": type("Split", (), {"labels": [0] * 40}), "val": type("Split", (), {"labels": [0] * 8})}
    )
    loop = {"host_syncs_per_step": {"train": 0, "eval": 0}, "cuda_syncs_per_step": None}
    monkeypatch.setattr(gpu_check, "bench_data", lambda cfg, s: splits)
    monkeypatch.setattr(gpu_check, "time_project", time_project)
    monkeypatch.setattr(
        gpu_check, "time_loop_costs", lambda *args: {**loop, "checkpoint_s": 0.1, "checkpoint_mib": 1.0}
    )
    monkeypatch.setattr(gpu_check.shutil, "which", lambda name: f"/usr/bin/{name}")
    return failures


def skipped_settings(options: CheckOptions, left_s: float) -> tuple[list[str], dict[str, str]]:
    measured, skipped, _, images = gpu_check.benchmark(options, lambda: left_s, "cpu", log=lambda _: None)
    assert images == (40, 8)
    return sorted(measured), skipped


def test_compiling_is_skipped_with_its_reason_and_the_eager_step_still_measured(fake_timings, monkeypatch, tmp_path):
    options = CheckOptions(out=tmp_path, budget_s=100, smoke=True)
    assert skipped_settings(options, 100) == (["compiled", "eager"], {})
    assert skipped_settings(options, 39) == (["eager"], {"compiled": "39 s left of the budget: no time to compile"})
    fake_timings["compiled"] = RuntimeError("inductor broke\nits long log")
    assert skipped_settings(options, 100) == (["eager"], {"compiled": "failed: RuntimeError: inductor broke"})
    monkeypatch.setattr(gpu_check.shutil, "which", lambda name: None)
    assert skipped_settings(options, 100) == (["eager"], {"compiled": "no C++ compiler for inductor's CPU kernels"})


def test_the_last_settings_failure_is_raised_when_no_other_was_measured(fake_timings, monkeypatch, tmp_path):
    both, compiled = (
        CheckOptions(out=tmp_path, budget_s=100, smoke=True, settings=settings)
        for settings in (("compiled", "eager"), ("compiled",))
    )
    fake_timings["compiled"] = RuntimeError("inductor broke")
    with pytest.raises(RuntimeError, match="inductor broke"):
        skipped_settings(compiled, 100)
    fake_timings["eager"] = RuntimeError("out of memory")
    with pytest.raises(RuntimeError, match="out of memory"):  # compiled skipped as failed, eager raised
        skipped_settings(both, 100)
    monkeypatch.setattr(gpu_check.shutil, "which", lambda name: None)
    with pytest.raises(gpu_check.UserError) as error:
        skipped_settings(compiled, 100)
    assert str(error.value) == "no setting could be benchmarked (compiled: no C++ compiler for inductor's CPU kernels)"
