"""Several devices keep the recipe: the global batch splits over the ranks, each rank draws its own MixUp/CutMix and
drop-path randomness from (seed, rank, epoch), and validation and test count every image exactly once. Tested on 2
and 3 gloo processes on the CPU."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from run_helpers import run_splits, saved_inputs, saved_model
from tiny_data import tiny_data

from vitladder.data.datamodule import per_device_batch
from vitladder.errors import UserError
from vitladder.pipeline import train_rung
from vitladder.training.module import seed_epoch
from vitladder.training.run import world_size


def rng_fingerprint() -> dict:
    """The global torch and numpy RNG states, hashed: what MixUp/CutMix and drop path will draw from."""
    return {
        "torch": hashlib.sha1(torch.get_rng_state().numpy().tobytes()).hexdigest(),
        "numpy": hashlib.sha1(np.random.get_state()[1].tobytes()).hexdigest(),
    }


# Run as `python probe.py OUT_DIR overrides...`; Lightning's DDP launcher starts the other ranks with the same command.
PROBE = textwrap.dedent(
    """
    import hashlib, json, sys
    import lightning as L
    import numpy as np
    import torch
    from vitladder.config import compose_rung
    from vitladder.pipeline import train_rung
    from vitladder.training import run as run_module

    out, overrides = sys.argv[1], sys.argv[2:]

    class Probe(L.Callback):
        def __init__(self):
            self.record = {"epochs": [], "lams": [], "lrs": []}

        def on_before_optimizer_step(self, trainer, module, optimizer):
            self.record["lrs"].append(optimizer.param_groups[0]["lr"])

        def on_train_start(self, trainer, module):
            mixup, draw = module.mixup, module.mixup._params_per_batch
            def recorded():
                lam, use_cutmix = draw()
                self.record["lams"].append([trainer.current_epoch, float(lam), bool(use_cutmix)])
                return lam, use_cutmix
            mixup._params_per_batch = recorded

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            if batch_idx == 0:  # right after the module seeded the epoch: nothing drawn yet
                self.record["epochs"].append({
                    "epoch": trainer.current_epoch, "batch": len(batch[1]), "batches": len(trainer.train_dataloader),
                    "torch": hashlib.sha1(torch.get_rng_state().numpy().tobytes()).hexdigest(),
                    "numpy": hashlib.sha1(np.random.get_state()[1].tobytes()).hexdigest(),
                    "labels": batch[1][:8].tolist()})

        def on_train_end(self, trainer, module):
            self.record.update(rank=trainer.global_rank, world_size=trainer.world_size, global_step=trainer.global_step)
            with open(f"{out}/rank{trainer.global_rank}.json", "w") as f:
                json.dump(self.record, f)

    probe = Probe()
    build_trainer = run_module.build_trainer
    run_module.build_trainer = lambda cfg, loggers, callbacks: build_trainer(cfg, loggers,
                                                                                    [*callbacks, probe])
    train_rung(compose_rung("stochastic_depth", overrides))
    """
)

# 2 smoke epochs of stochastic_depth (MixUp/CutMix, label smoothing, drop path). 97 validation images split unevenly
# over 2 or 3 ranks (49/48, 33/32/32) into per-rank batches of 24 or 16: one rank has a batch more than another.
# 383 training images make 7 global batches of 48 and a partial one, dropped; the warmup is round(0.1 x 7) = 1 step.
NUM_TRAIN, VAL, TEST, BATCH = 480, 97, 200, 48
OVERRIDES = [
    "profile=smoke",
    "profile.epoch_scale=0.02",
    *tiny_data(num_train=NUM_TRAIN, num_test=TEST, val_size=VAL, batch_size=BATCH),
    "trainer.enable_progress_bar=false",
    "trainer.accelerator=cpu",
    "analysis.num_images=16",
    "analysis.track_every_n_epochs=0",
    "wandb.mode=disabled",
]


def exact_accuracies(run_dir: Path) -> tuple[float, float]:
    """(validation, test) accuracy of the saved model over every image of the run's splits, in one process."""
    _, val, test = run_splits(run_dir)
    model = saved_model(run_dir)
    with torch.no_grad():
        return tuple(
            (model(saved_inputs(run_dir, s.images)).argmax(-1) == s.labels).float().mean().item() for s in (val, test)
        )


@pytest.mark.slow
@pytest.mark.parametrize("devices", [2, 3])
def test_ddp_keeps_the_recipe_draws_per_rank_and_counts_every_image_once(repo_root, tmp_path, devices):
    probe, out = tmp_path / "probe.py", tmp_path / "out"
    probe.write_text(PROBE)
    out.mkdir()
    # This checkout's sources in every rank, whatever the installed copy (the working directory is tmp_path).
    pythonpath = os.pathsep.join(filter(None, [str(repo_root / "src"), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONPATH": pythonpath}
    env.pop("LOCAL_RANK", None)
    result = subprocess.run(
        [
            sys.executable,
            str(probe),
            str(out),
            *OVERRIDES,
            f"output_root={out}",
            f"trainer.devices={devices}",
            "trainer.strategy=ddp",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    records = [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(devices)]

    # The recipe's steps whatever the number of devices: the global batch of 48 is split, not multiplied.
    steps_per_epoch = (NUM_TRAIN - VAL) // BATCH
    for record in records:
        assert record["world_size"] == devices and record["global_step"] == 2 * steps_per_epoch
        assert all(e["batch"] == BATCH // devices and e["batches"] == steps_per_epoch for e in record["epochs"])
    assert len({tuple(r["epochs"][0]["labels"]) for r in records}) == devices, "each rank trains on its own shard"
    for lrs in (record["lrs"] for record in records):  # the schedule spans the steps that train, on every rank
        assert len(lrs) == 2 * steps_per_epoch and lrs[0] == pytest.approx(1e-6) and max(lrs) == lrs[1]
        assert lrs[-1] == pytest.approx(1e-5) and lrs[-2] > 1.01e-5, "warmup_start_lr, 1 step up, min_lr at the end"

    # Each rank's MixUp/CutMix and drop-path streams: its own, and a pure function of (seed, rank, epoch),
    # so a run resumed at an epoch boundary draws the same (no RNG state in the checkpoint).
    for record in records:
        for epoch in record["epochs"]:
            seed_epoch(0, record["rank"], epoch["epoch"])
            assert {k: epoch[k] for k in ("torch", "numpy")} == rng_fingerprint()
    assert len({r["epochs"][0]["torch"] for r in records}) == devices
    assert len({tuple(map(tuple, r["lams"])) for r in records}) == devices, "ranks mix their batches differently"

    # Validation and test count every image once: the logged figures are the exact ones over all images.
    run_dir = out / "smoke" / "stochastic_depth"
    summary = json.loads((run_dir / "done.json").read_text())
    val_acc, test_acc = exact_accuracies(run_dir)
    assert summary["val_acc"] == pytest.approx(val_acc, abs=1e-6)
    assert summary["test_acc"] == pytest.approx(test_acc, abs=1e-6)


@pytest.mark.parametrize("rung, devices, batch", [("mixup_cutmix", 6, 510), ("epochs200", 1, 63)])
def test_an_odd_batch_per_device_under_mixup_fails_before_anything_is_written(tiny_cfg, tmp_path, rung, devices, batch):
    cfg = tiny_cfg(rung, "trainer.accelerator=cpu", f"trainer.devices={devices}", f"data.batch_size={batch}")
    with pytest.raises(UserError, match="MixUp/CutMix needs an even batch") as refused:
        train_rung(cfg)
    assert "\n" not in str(refused.value) and list(tmp_path.iterdir()) == []
    assert per_device_batch(batch, devices) == batch // devices  # without mixing (patch8) the split is fine


def test_a_batch_that_does_not_split_fails_before_anything_is_written(tiny_cfg, tmp_path):
    cfg = tiny_cfg(
        "patch8", "trainer.accelerator=cpu", "trainer.devices=3", "trainer.strategy=ddp", "data.batch_size=64"
    )
    assert world_size(cfg) == 3
    with pytest.raises(UserError, match="must split evenly over 3 devices"):
        train_rung(cfg)
    assert list(tmp_path.iterdir()) == []


def test_an_unavailable_accelerator_is_one_line():
    from vitladder.config import compose_rung

    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    with pytest.raises(UserError) as info:
        world_size(compose_rung("patch8", ["trainer.accelerator=gpu"]))
    assert "trainer.accelerator=gpu" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("strategy", ["ddp_spawn", "ddp_spawn_find_unused_parameters_true", "ddp_fork", "ddp_notebook"])
def test_a_strategy_that_trains_in_spawned_processes_is_refused_before_anything_is_written(
    tiny_cfg, tmp_path, strategy
):
    """Lightning's spawn and fork launchers hand back the weights only: the run's summary would read 0 epochs."""
    cfg = tiny_cfg("patch8", "trainer.accelerator=cpu", "trainer.devices=2", f"trainer.strategy={strategy}")
    with pytest.raises(UserError) as info:
        train_rung(cfg)
    message = str(info.value)
    assert message.startswith(f"trainer.strategy={strategy} ") and "use trainer.strategy=ddp" in message
    assert "\n" not in message and list(tmp_path.iterdir()) == []
    assert world_size(tiny_cfg("patch8", "trainer.accelerator=cpu", "trainer.devices=2", "trainer.strategy=ddp")) == 2


def test_a_notebook_is_refused_the_fork_launcher_that_auto_picks_there(tiny_cfg, monkeypatch):
    from lightning.pytorch.trainer.connectors import accelerator_connector

    monkeypatch.setattr(accelerator_connector, "_IS_INTERACTIVE", True)  # as in Jupyter: "auto" is ddp_fork there
    with pytest.raises(UserError, match="trainer.strategy=auto trains in processes that keep"):
        world_size(tiny_cfg("patch8", "trainer.accelerator=cpu", "trainer.devices=2"))
    assert world_size(tiny_cfg("patch8", "trainer.accelerator=cpu", "trainer.devices=1")) == 1
