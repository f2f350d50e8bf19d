"""Speed and scale, tested on the CPU: data on the training device, fused attention, no per-step host syncs,
torch.compile, a wall-clock budget, Lightning DDP (2 processes, gloo) and Hydra multirun under train.py,
and the SLURM launcher config."""

from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from run_helpers import fit, module_for, run_splits, saved_file, saved_inputs, saved_model, set_up_data
from timm.layers.attention import Attention
from tiny_data import tiny_data

from vitladder.config import CONF_DIR
from vitladder.data.datamodule import ImageDataModule
from vitladder.devtools.syncs import HostSyncs
from vitladder.model import ViTConfig, build_vit
from vitladder.pipeline import train_rung
from vitladder.run_folder import RunPaths

# The same tiny synthetic set as conftest.TINY_DATA, as train.py overrides (val_size even: no DDP padding).
SUBPROCESS_DATA = [
    "profile=smoke",
    *tiny_data(num_train=1200, num_test=200, val_size=200, batch_size=64),
    "trainer.enable_progress_bar=false",
    "analysis.num_images=64",
    "analysis.track_images=16",
]


# --- data on the device ------------------------------------------------------------------------------


def test_data_moves_to_the_trainers_device_even_when_set_up_before_it(tiny_cfg):
    # run.py calls setup() before the Trainer exists (to read the classes): fit's setup() must still move
    # the splits onto the training device. "meta" stands in for a GPU here.
    datamodule = ImageDataModule(tiny_cfg("patch4").data)
    datamodule.setup()
    assert datamodule.train.images.device.type == "cpu"
    datamodule.trainer = SimpleNamespace(
        strategy=SimpleNamespace(root_device=torch.device("meta")), global_rank=0, world_size=1
    )
    datamodule.setup("fit")
    for split in (datamodule.train, datamodule.val, datamodule.test):
        assert split.images.device.type == "meta" and split.labels.device.type == "meta"
    assert datamodule.train_dataloader().images.device.type == "meta"
    images, labels = next(iter(datamodule.val_dataloader()))  # batches are cut where the data lives
    assert images.device.type == "meta" and labels.device.type == "meta"


# --- fused attention ---------------------------------------------------------------------------------


class FusedAttentionProbe(L.Callback):
    """Every training step: every timm Attention is on the fused path and SDPA runs once per block."""

    def __init__(self, counter: list[int]) -> None:
        self.counter = counter
        self.before = 0
        self.steps = 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        modules = [m for m in pl_module.model.modules() if isinstance(m, Attention)]
        assert len(modules) == len(pl_module.model.blocks)
        assert all(m.fused_attn for m in modules), "training must use fused attention (SDPA)"
        self.before = self.counter[0]

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        assert self.counter[0] - self.before == len(pl_module.model.blocks)
        self.steps += 1


def test_training_runs_fused_attention_also_after_attention_tracking(tiny_cfg, tmp_path, monkeypatch):
    from vitladder.analysis.callback import AttentionAnalysis

    counter = [0]
    sdpa = F.scaled_dot_product_attention

    def counting_sdpa(*args, **kwargs):
        counter[0] += 1
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counting_sdpa)  # timm calls F.<name> at run time
    cfg = tiny_cfg("patch4", "profile.epoch_scale=0.02")
    probe = FusedAttentionProbe(counter)
    # The tracking analysis switches attention to the explicit path after every epoch; it must switch back.
    tracking = AttentionAnalysis(
        tmp_path / "analysis",
        "patch4",
        patch_px=4,
        num_images=16,
        batch_size=16,
        track_every_n_epochs=1,
        track_images=16,
        data=set_up_data(cfg),
    )
    fit(
        cfg,
        module_for(cfg),
        callbacks=[tracking, probe],
        max_epochs=2,
        limit_train_batches=3,
        limit_val_batches=1,
    )
    assert probe.steps == 6 and len(tracking.history) > 0


# --- no per-step host syncs (counted by devtools/syncs.py) ---------------------------------------------


def count_syncs(cfg, module, epochs: int, steps: int) -> tuple[collections.Counter, collections.Counter]:
    """(host syncs in training_step, host syncs in on_train_epoch_end) over ``epochs`` x ``steps`` steps."""
    with HostSyncs() as in_steps, HostSyncs() as at_epoch_ends:
        module.training_step = in_steps.counting(module.training_step)
        module.on_train_epoch_end = at_epoch_ends.counting(module.on_train_epoch_end)
        trainer = fit(cfg, module, max_epochs=epochs, limit_train_batches=steps, limit_val_batches=0)
    assert trainer.global_step == epochs * steps
    return in_steps.seen, at_epoch_ends.seen


@pytest.mark.parametrize("rung", ["patch4", "stochastic_depth"])  # stochastic_depth: MixUp/CutMix, smoothing, drop path
def test_training_steps_make_no_host_syncs(tiny_cfg, rung):
    cfg = tiny_cfg(rung, "profile.epoch_scale=0.02")
    step_counts, epoch_counts = count_syncs(cfg, module_for(cfg), epochs=2, steps=4)
    assert step_counts == {}, f"host syncs in training_step: {dict(step_counts)}"
    # Per epoch, not per step: the divergence check reads the epoch's loss (one item()), and logging the epoch's
    # metrics makes a tensor or two from Python numbers.
    assert epoch_counts["aten._local_scalar_dense"] == 2 and sum(epoch_counts.values()) <= 2 * 3, dict(epoch_counts)


def test_the_sync_counter_catches_a_sync(tiny_cfg):
    cfg = tiny_cfg("patch4")
    module = module_for(cfg)
    step = module.training_step

    def syncing_step(batch, batch_idx):
        loss = step(batch, batch_idx)
        loss.item()
        if loss > 0:  # __bool__
            pass
        return loss

    module.training_step = syncing_step
    step_counts, _ = count_syncs(cfg, module, epochs=1, steps=3)
    assert step_counts == {"aten._local_scalar_dense": 6}  # an item() and a bool() per step


# --- torch.compile -----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(not (shutil.which("gcc") or shutil.which("cc")), reason="inductor needs a C compiler")
def test_a_compiled_run_trains_and_saves_plain_state_dicts(tiny_cfg):
    from torch._dynamo.utils import counters

    counters.clear()
    # Two blocks keep inductor's CPU compile time down; the compile path is the same at any depth.
    cfg = tiny_cfg(
        "patch4",
        "speed.compile=true",
        "model.depth=2",
        "data.num_train=500",
        "data.val_size=64",
        "data.num_test=64",
        "analysis.num_images=32",
        "analysis.track_images=16",
    )
    summary = train_rung(cfg)
    assert counters["stats"]["unique_graphs"] > 0, "speed.compile=true must compile the model"
    assert summary["epochs"] == 1 and 0.0 <= summary["test_acc"] <= 1.0

    paths = RunPaths(Path(cfg.run_dir))
    saved = saved_file(paths.root)
    model = build_vit(ViTConfig(**saved["vit_config"]))
    model.load_state_dict(saved["state_dict"], strict=True)
    ckpt = torch.load(paths.last_ckpt, map_location="cpu", weights_only=True)
    assert not any("_orig_mod" in key for key in ckpt["state_dict"])
    model.load_state_dict({k.removeprefix("model."): v for k, v in ckpt["state_dict"].items()}, strict=True)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in saved["state_dict"].items())


# --- a wall-clock budget -----------------------------------------------------------------------------


def test_max_time_stops_cleanly_then_tests_and_saves(tiny_cfg):
    cfg = tiny_cfg("patch8", "trainer.max_epochs=1000", "trainer.max_time=00:00:00:08")
    summary = train_rung(cfg)
    paths = RunPaths(Path(cfg.run_dir))
    assert paths.done.is_file() and paths.model.is_file() and paths.last_ckpt.is_file()
    assert json.loads(paths.done.read_text()) == summary
    assert 0 < summary["epochs"] < 1000 and summary["epochs_planned"] == 1000
    # Epochs counted in optimizer steps: the epoch max_time cut short is the fraction of it trained, not a whole one.
    assert summary["epochs"] == pytest.approx(summary["steps"] / summary["steps_per_epoch"], abs=0.005)
    assert 0.0 <= summary["test_acc"] <= 1.0 and 0.0 <= summary["val_acc"] <= 1.0
    assert summary["seconds"] < 8 + 120  # the budget, then test, analysis and saving


# --- train.py in subprocesses: DDP and multirun ------------------------------------------------------

# Records every rename onto an output file, with the process id: how many processes wrote done.json.
AUDIT_HOOK = textwrap.dedent(
    """
    import os, sys
    _LOG = os.environ["VITLADDER_TEST_WRITES"]
    _WATCHED = ("done.json", "model.safetensors", "config.yaml", "wandb_run_id.txt")

    def _hook(event, args):
        if event == "os.rename" and os.path.basename(str(args[1])) in _WATCHED:
            with open(_LOG, "a") as log:
                log.write(f"{os.getpid()} {args[1]}\\n")

    sys.addaudithook(_hook)
    """
)


def run_train(repo_root: Path, tmp_path: Path, args: list[str], timeout: int = 600) -> tuple[Path, list[str]]:
    """Runs train.py from an empty working directory; returns (that directory, the recorded writes)."""
    cwd, hooks = tmp_path / "cwd", tmp_path / "hooks"
    cwd.mkdir()
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(AUDIT_HOOK)
    writes = tmp_path / "writes.log"
    env = {
        **os.environ,
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "VITLADDER_TEST_WRITES": str(writes),
        # This checkout's sources, whatever copy is installed: the working directory is elsewhere.
        "PYTHONPATH": os.pathsep.join(filter(None, [str(hooks), str(repo_root / "src"), os.environ.get("PYTHONPATH")])),
    }
    env.pop("LOCAL_RANK", None)  # a fresh job, not a child of some other launcher
    result = subprocess.run(
        [sys.executable, str(repo_root / "train.py"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return cwd, writes.read_text().splitlines() if writes.exists() else []


def writers(writes: list[str], name: str) -> list[str]:
    return [line.split()[0] for line in writes if Path(line.split(maxsplit=1)[1]).name == name]


def evaluate_on_validation(run_dir: Path) -> tuple[float, torch.Tensor]:
    """(accuracy of the final model over the run's whole validation split, per-image correctness)."""
    _, val, _ = run_splits(run_dir)
    model = saved_model(run_dir)
    with torch.no_grad():
        correct = (model(saved_inputs(run_dir, val.images)).argmax(dim=-1) == val.labels).float()  # (N,)
    return correct.mean().item(), correct


@pytest.mark.slow
def test_ddp_on_two_processes_writes_one_run_with_metrics_over_the_whole_validation_set(repo_root, tmp_path):
    out = tmp_path / "out"
    cwd, writes = run_train(
        repo_root,
        tmp_path,
        [
            "+step=patch4",
            *SUBPROCESS_DATA,
            "trainer.accelerator=cpu",
            "trainer.devices=2",
            "trainer.strategy=ddp",
            f"output_root={out}",
            "profile.epoch_scale=0.02",
        ],
    )
    run_dir = out / "smoke" / "patch4"
    assert sorted(p.relative_to(out).as_posix() for p in out.glob("*/*") if p.is_dir()) == ["smoke/patch4"]
    assert len(list((run_dir / "wandb").glob("offline-run-*"))) == 1, "one W&B run, from rank 0 only"
    assert len(set(writers(writes, "done.json"))) == 1 and len(writers(writes, "done.json")) == 1
    assert len(writers(writes, "model.safetensors")) == 1
    assert list(cwd.iterdir()) == [], "no outputs/, multirun/, lightning_logs/ or wandb/ in the working directory"

    summary = json.loads((run_dir / "done.json").read_text())
    assert summary["epochs"] == 2
    accuracy, correct = evaluate_on_validation(run_dir)
    # 200 images, 100 per rank, no padding: the logged value is the exact accuracy over all of them,
    # not rank 0's half (rank r validates images r, r + 2, ...).
    assert summary["val_acc"] == pytest.approx(accuracy, abs=1e-6)
    halves = correct[0::2].mean().item(), correct[1::2].mean().item()
    if halves[0] != halves[1]:
        assert summary["val_acc"] != pytest.approx(halves[0], abs=1e-6)


@pytest.mark.slow
def test_multirun_trains_each_rung_into_its_folder(repo_root, tmp_path):
    out = tmp_path / "out"
    cwd, writes = run_train(
        repo_root,
        tmp_path,
        ["-m", "+step=patch8,augment", *SUBPROCESS_DATA, f"output_root={out}", "analysis.enabled=false"],
    )
    ladder = out / "smoke"
    assert sorted(p.name for p in ladder.iterdir() if p.is_dir()) == ["augment", "patch8"]
    for rung in ("patch8", "augment"):
        run_dir = ladder / rung
        assert json.loads((run_dir / "done.json").read_text())["rung"] == rung
        assert len(list((run_dir / "wandb").glob("offline-run-*"))) == 1
    assert len(writers(writes, "done.json")) == 2
    assert list(cwd.iterdir()) == [], "no outputs/ or multirun/ in the working directory"


# --- SLURM -------------------------------------------------------------------------------------------


def compose_with_hydra(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=overrides, return_hydra_config=True)


def test_the_submitit_slurm_launcher_composes():
    cfg = compose_with_hydra(["step=patch8", "hydra/launcher=submitit_slurm", "hydra.launcher.partition=gpu"])
    launcher = cfg.hydra.launcher
    assert launcher._target_ == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert launcher.partition == "gpu"


def test_the_projects_slurm_launcher_asks_for_one_task_per_gpu():
    cfg = compose_with_hydra(
        [
            "step=warmup",
            "hydra/launcher=slurm",
            "trainer.devices=4",
            "trainer.strategy=ddp",
            "hydra.launcher.partition=gpu",
        ]
    )
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("submitit_launcher.SlurmLauncher")
    assert (launcher.gpus_per_node, launcher.tasks_per_node) == (4, 4)  # Lightning's SLURM DDP: a task per GPU
    assert launcher.partition == "gpu" and launcher.timeout_min >= 60
    assert cfg.hydra.sweep.dir == str(Path(cfg.output_root) / cfg.ladder)
