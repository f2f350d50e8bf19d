"""The LightningModule: one training step of every rung, the schedule, MixUp and the NaN guard."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import Logger
from run_helpers import fit, module_for

from vitladder.config import rung_names
from vitladder.training.module import TrainingDiverged


@pytest.mark.parametrize("rung", rung_names())
def test_one_training_step_of_every_rung(tiny_cfg, rung):
    cfg = tiny_cfg(rung)
    module = module_for(cfg)
    assert module.model.patch_embed.patch_size == (cfg.model.patch_size,) * 2
    assert (module.mixup is not None) == (cfg.mixup.mixup_alpha > 0)
    before = {k: v.clone() for k, v in module.model.state_dict().items()}
    trainer = fit(cfg, module, fast_dev_run=1)
    after = module.model.state_dict()
    assert trainer.global_step == 1
    assert any(not torch.equal(before[k], after[k]) for k in before), "one step must change the weights"
    assert torch.isfinite(trainer.callback_metrics["train/loss"])
    assert 0.0 <= float(trainer.callback_metrics["val/acc"]) <= 1.0


def test_drop_path_rises_over_the_blocks(tiny_cfg):
    module = module_for(tiny_cfg("stochastic_depth"))
    rates = [block.drop_path1.drop_prob for block in module.model.blocks[1:]]
    assert rates == sorted(rates) and rates[-1] == pytest.approx(0.1)


class RecordLR(L.Callback):
    def __init__(self):
        self.lrs = []

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.lrs.append(trainer.optimizers[0].param_groups[0]["lr"])


@pytest.mark.parametrize("rung", ["patch4", "warmup"])
def test_learning_rate_warms_up_then_decays_by_cosine(tiny_cfg, rung):
    # 4 epochs of 5 steps; the warmup rung warms up for 2 of them (50 of 100 epochs, scaled by 0.04)
    warmup = rung == "warmup"
    cfg = tiny_cfg(rung, "profile.epoch_scale=0.04", *(["optim.warmup_epochs=50"] if warmup else []))
    recorder = RecordLR()
    fit(
        cfg,
        module_for(cfg),
        max_epochs=4,
        limit_train_batches=5,
        limit_val_batches=0,
        callbacks=[recorder],
    )
    lrs, peak = recorder.lrs, cfg.optim.lr
    assert len(lrs) == 20
    top = max(range(len(lrs)), key=lrs.__getitem__)
    if warmup:
        assert lrs[0] == pytest.approx(cfg.optim.warmup_start_lr) and top == 10 and lrs[top] == pytest.approx(peak)
        assert all(a < b for a, b in zip(lrs[:top], lrs[1 : top + 1])), "linear warmup rises every step"
    else:
        assert top == 0 and lrs[0] == pytest.approx(peak)
    assert all(a > b for a, b in zip(lrs[top:], lrs[top + 1 :])), "cosine decay falls every step"
    assert lrs[-1] < 0.05 * peak


class RecordStepLR(L.Callback):
    """The learning rate of every optimizer step (not of every batch: accumulation steps once per few)."""

    def __init__(self):
        self.lrs = []

    def on_before_optimizer_step(self, trainer, module, optimizer):
        self.lrs.append(optimizer.param_groups[0]["lr"])


@pytest.mark.parametrize("accumulate", [1, 2, 4])
def test_the_schedule_spans_the_optimizer_steps_that_train(tiny_cfg, accumulate):
    # 1,000 training images in batches of 64: 15 whole batches an epoch, the partial 16th dropped. Accumulating
    # 2 or 4 of them, Lightning steps on the last batch of an epoch too: 8 or 4 steps an epoch, not 7 or 3.
    cfg = tiny_cfg("warmup", "profile.epoch_scale=0.02", "optim.warmup_epochs=50")  # 2 epochs, 1 of warmup
    recorder = RecordStepLR()
    steps = {"accumulate_grad_batches": accumulate, "limit_val_batches": 0}
    trainer = fit(cfg, module_for(cfg), max_epochs=2, callbacks=[recorder], **steps)
    per_epoch = -(-15 // accumulate)
    lrs, optim = recorder.lrs, cfg.optim
    assert trainer.global_step == len(lrs) == 2 * per_epoch
    assert lrs[0] == pytest.approx(optim.warmup_start_lr)
    assert max(lrs) == pytest.approx(optim.lr) and lrs.index(max(lrs)) == per_epoch, "the warmup ends after epoch 1"
    assert lrs[-1] == pytest.approx(optim.min_lr) and lrs[-2] > 1.01 * optim.min_lr, "min_lr on the last step only"


def test_a_schedule_of_two_steps_trains_at_lr_then_at_min_lr(tiny_cfg):
    # The shortest cosine: one step after the first, so the second is its end (not its middle).
    cfg = tiny_cfg("patch8", "profile.epoch_scale=0.001")  # one epoch, no warmup
    recorder = RecordStepLR()
    fit(cfg, module_for(cfg), max_epochs=1, limit_train_batches=2, limit_val_batches=0, callbacks=[recorder])
    assert recorder.lrs == [pytest.approx(cfg.optim.lr), pytest.approx(cfg.optim.min_lr)]


class RecordLogger(Logger):
    """A logger that keeps what Lightning hands it: hyperparameters and metrics."""

    name, version = "record", 0

    def __init__(self):
        super().__init__()
        self.hparams, self.metrics = [], []

    def log_hyperparams(self, params, *args, **kwargs):
        self.hparams.append(dict(params))

    def log_metrics(self, metrics, step=None):
        self.metrics.append(dict(metrics))


def test_the_modules_arguments_stay_out_of_the_loggers(tiny_cfg):
    # The loggers' config is the run's resolved config (W&B: vitladder.wandb.run), not the module's arguments.
    cfg, recorder = tiny_cfg("patch8"), RecordLogger()
    module = module_for(cfg)
    assert module.hparams["optim"]["lr"] == cfg.optim.lr, "the checkpoint keeps them"
    fit(cfg, module, logger=recorder, max_steps=1, limit_val_batches=0)
    assert any("train/loss" in metrics for metrics in recorder.metrics), "the logger was in use"
    assert not any("optim" in params for params in recorder.hparams), recorder.hparams


def test_nan_loss_stops_with_a_clear_message(tiny_cfg):
    cfg = tiny_cfg("patch8", "optim.lr=1e30")
    module = module_for(cfg)
    with pytest.raises(TrainingDiverged, match=r"epoch 0.*lower optim.lr"):
        fit(cfg, module, max_epochs=2, limit_val_batches=0)


class RecordBatches(L.Callback):
    def __init__(self):
        self.first_labels = {}

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if batch_idx == 0:
            self.first_labels[trainer.current_epoch] = batch[1][:16].clone()


def test_each_epoch_trains_on_its_own_order_of_the_data(tiny_cfg):
    cfg = tiny_cfg("patch8")
    recorder = RecordBatches()
    module = module_for(cfg)
    trainer = fit(cfg, module, max_epochs=3, limit_train_batches=1, limit_val_batches=0, callbacks=[recorder])
    batches = trainer.datamodule.train_dataloader()
    for epoch in range(3):
        expected = batches.labels[batches.indices(epoch)[:16]]
        assert torch.equal(recorder.first_labels[epoch], expected), f"epoch {epoch} replayed another epoch's order"
    assert not torch.equal(recorder.first_labels[0], recorder.first_labels[1])


def test_train_acc_under_mixup_scores_the_dominant_class_of_the_mixed_target(tiny_cfg):
    import torch.nn.functional as F

    module = module_for(tiny_cfg("mixup_cutmix"))
    labels = torch.arange(8)  # (B,) the classes of the images before mixing
    dominant = (labels + 3) % 10  # each blend is mostly another image: its mixed target's top class
    soft = 0.35 * F.one_hot(labels, 10) + 0.65 * F.one_hot(dominant, 10)  # (B, 10)
    module.mixup = lambda images, labels: (images, soft)
    module.forward = lambda images: 5.0 * F.one_hot(dominant, 10).float()  # (B, 10) predicts the dominant class
    module.training_step((torch.zeros(8, 3, 32, 32), labels), 0)
    assert module.train_acc.compute() == 1.0

    module = module_for(tiny_cfg("label_smoothing"))  # no mixing: the true labels
    module.forward = lambda images: 5.0 * F.one_hot(dominant, 10).float()
    module.training_step((torch.zeros(8, 3, 32, 32), labels), 0)
    assert module.train_acc.compute() == 0.0


def test_the_module_hands_fused_to_timms_adamw(tiny_cfg, matmul_precision):
    # As on CUDA (cuda_choices.py); fused AdamW also runs on the CPU, so the path from the config through the
    # module and timm's factory is real.
    cfg = tiny_cfg("patch4", "speed.rehearse_cuda=true")
    trainer = fit(cfg, module_for(cfg), fast_dev_run=1)
    optimizer = trainer.optimizers[0]
    assert isinstance(optimizer, torch.optim.AdamW) and optimizer.defaults["fused"] is True
    assert [group["weight_decay"] for group in optimizer.param_groups] == [0.0, cfg.optim.weight_decay]
    plain = tiny_cfg("patch4")
    assert not fit(plain, module_for(plain), fast_dev_run=1).optimizers[0].defaults["fused"]
