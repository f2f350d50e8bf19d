"""One rung end to end: its folder, its W&B run read back, skipping when finished, learning real data."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from run_helpers import saved_file

from vitladder.errors import UserError
from vitladder.model import ViTConfig, build_vit
from vitladder.pipeline import train_rung
from vitladder.run_folder import RunPaths, is_finished
from vitladder.training import run as run_module


def read_wandb_summary(run_dir: Path) -> dict:
    wandb_cli = Path(sys.executable).with_name("wandb")
    result = subprocess.run(
        [str(wandb_cli), "leet", "inspect", "--summary", "--json", str(run_dir / "wandb")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_a_rung_writes_its_folder_and_a_wandb_run(tiny_cfg):
    cfg = tiny_cfg("mixup_cutmix", "profile.epoch_scale=0.02")  # 2 epochs
    summary = train_rung(cfg, overrides=["step=mixup_cutmix", "profile.epoch_scale=0.02"])
    paths = RunPaths(Path(cfg.run_dir))
    assert paths.root == Path(cfg.output_root) / "smoke" / "mixup_cutmix"
    for path in (paths.config, paths.overrides, paths.last_ckpt, paths.model, paths.metrics_csv, paths.done):
        assert path.is_file(), path
    assert OmegaConf.load(paths.overrides) == ["step=mixup_cutmix", "profile.epoch_scale=0.02"]
    assert OmegaConf.load(paths.config) == OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    assert summary == json.loads(paths.done.read_text()) and summary["epochs"] == 2
    # The run's config reaches W&B and config.yaml from the project, not as Lightning's hparams dump.
    assert not (paths.root / "hparams.yaml").exists()

    rows = list(csv.DictReader(paths.metrics_csv.open()))
    per_epoch = {}
    for row in rows:
        if row.get("test/acc") or not row.get("epoch"):
            continue  # the test row, written once at the end, and the per-step learning-rate rows
        for key, value in row.items():
            if value:
                per_epoch.setdefault(float(row["epoch"]), {})[key] = float(value)
    assert sorted(per_epoch) == [0, 1, 2]  # epochs trained; 0: the tracking point at initialisation
    for epoch in (1, 2):
        assert {"train/loss", "train/acc", "val/loss", "val/acc"} <= set(per_epoch[epoch])
    # The learning rate, one key, at the optimizer steps Lightning logs at (smoke: log_every_n_steps=5, of 2 x 15)
    lr_rows = [row for row in rows if row.get("lr")]
    assert [int(row["step"]) for row in lr_rows] == [4, 9, 14, 19, 24, 29] and not any(r["epoch"] for r in lr_rows)
    assert not [key for key in rows[0] if key.startswith("lr-") or "/pg" in key]
    assert float([row for row in rows if row.get("test/acc")][0]["test/acc"]) == pytest.approx(summary["test_acc"])

    saved = saved_file(paths.root)
    model = build_vit(ViTConfig(**saved["vit_config"]))
    model.load_state_dict(saved["state_dict"])  # strict: no `_orig_mod.` or Lightning prefixes
    assert saved["rung"] == "mixup_cutmix" and len(saved["classes"]) == 10

    analysis = paths.root / "analysis"
    with (analysis / "heads.csv").open() as heads:
        rows = list(csv.DictReader(heads))
    assert len(rows) == 42 and list(rows[0])[:5] == ["layer", "head", "distance_px", "entropy_nats", "cls_share"]
    assert len(list(analysis.glob("*.png"))) >= 3
    assert summary["uniform_distance_px"] == pytest.approx(16.546, abs=1e-3)

    wandb_summary = read_wandb_summary(paths.root)
    # The W&B config is the resolved Hydra config, once (rung_info aside), plus the rung's position in the
    # ladder and its declared inputs: nothing from save_hyperparameters beside it (no top-level max_epochs,
    # warmup_epochs, compile, ...).
    expected = {key: value for key, value in OmegaConf.to_container(cfg, resolve=True).items() if key != "rung_info"}
    inputs = wandb_summary["config"].get("inputs")
    assert [(i["type"], i["name"]) for i in inputs] == [("dataset", "dataset-synthetic")]
    assert wandb_summary["config"] == {**expected, "rung_index": 5, "inputs": inputs}
    assert torch.load(paths.last_ckpt, weights_only=True)["hyper_parameters"]["model"]["patch_size"] == 4
    text = json.dumps(wandb_summary)
    for key in (
        "test/acc",
        "val/acc",
        "train/loss",
        "val/loss",
        "lr",
        "analysis/layer1_distance_px",
        "analysis/layer1_entropy_nats",
        "analysis/uniform_distance_drop_px",
    ):
        assert key in text, key
    logged = [float(value) for value in re.findall(r'"test/acc": ([-+.0-9eE]+)', text)]  # the value, not only the key
    assert logged and all(value == pytest.approx(summary["test_acc"], abs=1e-6) for value in logged)


class DeterministicOff:
    """Trainer(deterministic=True) switches torch's global flag on; later tests must not inherit it."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        torch.use_deterministic_algorithms(False)


def test_trainer_arguments_from_the_command_line_reach_the_trainer(tiny_cfg, monkeypatch):
    built = []
    build_trainer = run_module.build_trainer
    monkeypatch.setattr(run_module, "build_trainer", lambda *args: built.append(build_trainer(*args)) or built[-1])
    cfg = tiny_cfg(
        "patch8",
        "trainer.gradient_clip_val=0.5",
        "trainer.accumulate_grad_batches=2",
        "trainer.limit_train_batches=4",
        "trainer.deterministic=true",
        "trainer.val_check_interval=0.5",
        "analysis.enabled=false",
    )
    with DeterministicOff():
        train_rung(cfg)
        assert torch.are_deterministic_algorithms_enabled()
    trainer = built[0]
    assert trainer.gradient_clip_val == 0.5 and trainer.accumulate_grad_batches == 2
    assert trainer.limit_train_batches == 4 and trainer.val_check_interval == 0.5
    assert trainer.global_step == 2, "4 batches, 2 per optimizer step"
    assert trainer.max_epochs == cfg.trainer.max_epochs == 1 and trainer.precision == "32-true"
    assert trainer.progress_bar_callback is None and trainer.default_root_dir == cfg.run_dir


def test_a_finished_rung_is_skipped_untouched(tiny_cfg):
    cfg = tiny_cfg("patch8")
    first = train_rung(cfg)
    done = RunPaths(Path(cfg.run_dir)).done
    stamp = done.stat().st_mtime_ns
    assert is_finished(cfg.run_dir) and train_rung(cfg) == first
    assert done.stat().st_mtime_ns == stamp


@pytest.mark.slow
def test_the_smoke_model_learns_synthetic_data(tmp_path):
    from vitladder.config import compose_rung

    # 4 epochs on 2,000 images of a set generated at that size (not 10,000): val acc 0.968 (seed 0), 0.940 (seed 1).
    cfg = compose_rung(
        "warmup",
        [
            "profile=smoke",
            f"output_root={tmp_path}",
            "trainer.enable_progress_bar=false",
            "profile.epoch_scale=0.04",
            "data.train_subset=2000",
            "data.num_train=2500",
            "data.num_test=500",
        ],
    )
    summary = train_rung(cfg)
    assert summary["val_acc"] > 0.90, summary


@pytest.mark.slow
def test_a_short_run_on_real_cifar10_clearly_beats_chance(tmp_path, cifar10_archive, cifar10_cache_dir):
    from vitladder.config import compose_rung

    # The warmup rung's recipe (5 epochs) at width 96 on 8x8 patches (17 tokens, not 65: a quarter of the cost per
    # image) and 5,000 training images: measured test acc 0.297 (seeds 0 and 1).
    cfg = compose_rung(
        "warmup",
        [
            "profile=smoke",
            "data=imagefolder",
            f"data.root={cifar10_archive}",
            f"data.cache_dir={cifar10_cache_dir}",
            "data.train_subset=5000",
            "data.test_subset=1000",
            "data.val_size=1000",
            "model.embed_dim=96",
            "model.patch_size=8",
            "profile.epoch_scale=0.05",
            f"output_root={tmp_path}",
            "trainer.enable_progress_bar=false",
        ],
    )
    summary = train_rung(cfg)
    print(f"real CIFAR-10 subset: test acc {summary['test_acc']:.3f} in {summary['seconds']} s")
    assert summary["test_acc"] > 0.20, summary  # chance is 0.10 (+-0.01 on 1,000 test images): twice chance


def test_a_batch_larger_than_the_training_split_is_refused_before_the_run_folder_exists(tiny_cfg):
    cfg = tiny_cfg("patch8", "data.batch_size=5000")
    with pytest.raises(UserError) as error:
        train_rung(cfg)
    assert str(error.value) == (
        "data.batch_size=5000 is larger than the training split (1000 images): lower data.batch_size"
    )
    assert not Path(cfg.run_dir).exists()
