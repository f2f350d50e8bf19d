"""The recipe each rung really trains with, read off its LightningModule on tiny tensors, no training:
the loss and its targets (label smoothing exactly once, MixUp's soft targets carrying it), plain
cross-entropy for validation and test, AdamW's parameter groups, and the learning-rate schedule."""

from __future__ import annotations

import math
import random
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Timer
from omegaconf import OmegaConf
from run_helpers import module_for, set_up_data
from torch import nn

from vitladder.config import compose_rung, rung_names, scaled_epochs
from vitladder.run_folder import RunPaths
from vitladder.training.module import RecipeModule, TrainingDiverged, seed_epoch
from vitladder.training.run import build_module, build_trainer

K = 10  # classes
SMOOTHING = 0.1  # the label_smoothing rung's value (README), kept by every rung above it


def recipe(rung: str) -> tuple[float, bool]:
    """(label smoothing, MixUp/CutMix on) that the README's ladder table gives the rung."""
    names = rung_names()
    level = names.index(rung)
    return (SMOOTHING if level >= names.index("label_smoothing") else 0.0), level >= names.index("mixup_cutmix")


def smoothed(labels: torch.Tensor, eps: float) -> torch.Tensor:
    """(B, K) one-hot targets smoothed once: 1 - eps + eps/K on the class, eps/K elsewhere."""
    return F.one_hot(labels, K).double() * (1 - eps) + eps / K


@pytest.mark.parametrize("rung", rung_names())
def test_the_smoke_profile_trains_each_rung_with_the_full_recipes_loss(rung: str) -> None:
    full, smoke = compose_rung(rung), compose_rung(rung, ["profile=smoke"])
    eps, mixed = recipe(rung)
    assert full.loss.label_smoothing == eps
    assert (full.mixup.mixup_alpha, full.mixup.cutmix_alpha) == ((0.8, 1.0) if mixed else (0.0, 0.0))
    assert smoke.loss == full.loss and smoke.mixup == full.mixup


@pytest.mark.parametrize("rung", rung_names())
def test_label_smoothing_reaches_the_training_loss_exactly_once(tiny_cfg, rung: str, monkeypatch) -> None:
    eps, mixed = recipe(rung)
    module = module_for(tiny_cfg(rung, "model.depth=1")).eval()  # eval: a forward to recompute
    images = torch.randn(16, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    labels = torch.arange(16) % K  # every row's partner under the batch flip has another class
    seen = []
    if module.mixup is not None:
        mixup = module.mixup
        monkeypatch.setattr(module, "mixup", lambda x, y: seen.append(mixup(x, y)) or seen[-1])
    assert (module.mixup is not None) == mixed
    if mixed:  # timm's Mixup with the rung's settings: one of MixUp (alpha 0.8) or CutMix (1.0) per batch
        m, cfg = mixup, module.hparams.mixup
        assert (m.mixup_alpha, m.cutmix_alpha, m.mix_prob, m.switch_prob) == (0.8, 1.0, cfg["prob"], cfg["switch_prob"])
        assert (m.label_smoothing, m.num_classes, m.mode) == (eps, K, "batch")

    torch.manual_seed(0)
    loss = module.training_step((images.clone(), labels), 0)  # timm mixes the batch in place

    if mixed:
        ((inputs, targets),) = seen
        assert targets.shape == (16, K) and not torch.equal(inputs, images)
        # timm's soft targets carry the smoothing: lam * smooth(y) + (1 - lam) * smooth(flip(y))
        lam = (targets[0, labels[0]].item() - eps / K) / (1 - eps)
        expected = lam * smoothed(labels, eps) + (1 - lam) * smoothed(labels.flip(0), eps)
        assert torch.allclose(targets.double(), expected, atol=1e-6)
        assert 0.0 <= lam <= 1.0
    else:
        inputs, targets = images, smoothed(labels, eps)
    logits = module(inputs)
    # the criterion adds nothing on top: the cross-entropy against exactly these targets
    expected_loss = -(targets.double() * logits.double().log_softmax(-1)).sum(-1).mean()
    assert loss.item() == pytest.approx(expected_loss.item(), rel=1e-5)
    assert module.train_loss.compute().item() == pytest.approx(loss.item(), rel=1e-6)
    # training accuracy: the true class, or under MixUp/CutMix the dominant class of the mixed target
    scored = targets.argmax(-1) if mixed else labels
    assert module.train_acc.compute().item() == pytest.approx((logits.argmax(-1) == scored).float().mean().item())


@pytest.mark.filterwarnings("ignore:You are trying to `self.log\\(\\)`")  # no trainer: logging is skipped
def test_validation_and_test_loss_are_plain_cross_entropy_over_every_image(tiny_cfg, monkeypatch) -> None:
    module = module_for(tiny_cfg("stochastic_depth", "model.depth=1")).eval()
    monkeypatch.setattr(module, "mixup", lambda *a: pytest.fail("MixUp reached an evaluation batch"))
    generator = torch.Generator().manual_seed(1)
    images, labels = torch.randn(8, 3, 32, 32, generator=generator), torch.randint(0, K, (8,), generator=generator)
    for step, metrics in (
        (module.validation_step, (module.val_loss, module.val_acc)),
        (module.test_step, (module.test_loss, module.test_acc)),
    ):
        for i, cut in enumerate((slice(0, 5), slice(5, 8))):  # uneven batches: weighted by their size
            step((images[cut], labels[cut]), i)
        logits = module(images)
        assert metrics[0].compute().item() == pytest.approx(F.cross_entropy(logits, labels).item(), rel=1e-5)
        assert metrics[1].compute().item() == pytest.approx((logits.argmax(-1) == labels).float().mean().item())


def module_mixing(mixup: dict, label_smoothing: float = 0.0, num_classes: int = K) -> RecipeModule:
    model = {"embed_dim": 8, "depth": 1, "num_heads": 2, "num_classes": num_classes}
    return RecipeModule(model, {}, label_smoothing, mixup, max_epochs=1, warmup_epochs=0, steps_per_epoch=1)


@pytest.mark.parametrize("mixup_alpha, cutmix_alpha", [(0.0, 0.0), (0.5, 0.0), (0.0, 0.5)])
def test_either_alpha_turns_mixing_on(mixup_alpha: float, cutmix_alpha: float) -> None:
    module = module_mixing({"mixup_alpha": mixup_alpha, "cutmix_alpha": cutmix_alpha, "prob": 1.0, "switch_prob": 0.5})
    assert (module.mixup is None) == (mixup_alpha == cutmix_alpha == 0.0)


def test_every_mixing_setting_reaches_timm() -> None:
    # Values unlike timm's defaults, so a setting dropped on the way would show.
    mixup = module_mixing({"mixup_alpha": 0.3, "cutmix_alpha": 0.6, "prob": 0.7, "switch_prob": 0.2}, 0.15, 7).mixup
    assert (mixup.mixup_alpha, mixup.cutmix_alpha, mixup.mix_prob, mixup.switch_prob) == (0.3, 0.6, 0.7, 0.2)
    assert (mixup.label_smoothing, mixup.num_classes, mixup.mode) == (0.15, 7, "batch")  # one draw per batch


def test_accuracy_counts_the_datas_classes(tiny_cfg) -> None:
    module = module_for(tiny_cfg("patch8", "model.depth=1"))
    assert [metric.num_classes for metric in (module.train_acc, module.val_acc, module.test_acc)] == [K] * 3


def test_the_hyperparameters_saved_in_checkpoints_are_the_modules_arguments(tiny_cfg) -> None:
    # last.ckpt's hyper_parameters rebuild the ViT when a Lightning checkpoint is analysed
    cfg = tiny_cfg("mixup_cutmix")
    data = set_up_data(cfg)
    module = build_module(cfg, data)
    assert dict(module.hparams) == {
        "model": {**OmegaConf.to_container(cfg.model), "num_classes": K, "img_size": 32},
        "steps_per_epoch": data.steps_per_epoch,
        "normalization": data.stats.to_dict(),  # the training split's, for the analysis of the checkpoint
        "optim": OmegaConf.to_container(cfg.optim),
        "label_smoothing": 0.1,
        "mixup": OmegaConf.to_container(cfg.mixup),
        "max_epochs": 1,
        "warmup_epochs": 0.05,
        "compile": False,
        "fused_adamw": False,  # a CPU run
        "seed": cfg.seed,
    }


def test_a_nan_loss_stops_the_epoch_with_what_to_do(tiny_cfg) -> None:
    module = module_for(tiny_cfg("patch8", "model.depth=1"))
    module.train_loss.update(torch.tensor([1.0, float("nan")]))
    with pytest.raises(
        TrainingDiverged,
        match=r"^training loss became nan in epoch 0: lower optim.lr or add warmup; "
        r"the last good checkpoint is kept$",
    ):
        module.on_train_epoch_end()


def attach_trainer(module: RecipeModule, batches: int = 10, limit: int | float = 1.0, accumulate: int = 1):
    """``batches`` an epoch (what the data give build_module), and the few trainer attributes
    configure_optimizers and the schedule read (no training)."""
    module.hparams.steps_per_epoch = batches
    module.trainer = SimpleNamespace(limit_train_batches=limit, accumulate_grad_batches=accumulate, global_step=0)
    return module.trainer


def no_decay_names(model: nn.Module) -> set[str]:
    """What the README promises no weight decay: biases, norms, the CLS token, position embeddings."""
    norms = {
        f"{name}.{p}"
        for name, m in model.named_modules()
        if isinstance(m, nn.LayerNorm)
        for p, _ in m.named_parameters(recurse=False)
    }
    return norms | {n for n, _ in model.named_parameters() if n.endswith(".bias")} | {"cls_token", "pos_embed"}


def test_weight_decay_skips_biases_norms_cls_token_and_position_embeddings(tiny_cfg) -> None:
    cfg = tiny_cfg("patch4")
    module = module_for(cfg)
    attach_trainer(module)
    optimizer = module.configure_optimizers()["optimizer"]
    assert type(optimizer) is torch.optim.AdamW
    names = {id(p): n for n, p in module.model.named_parameters()}
    groups = [[names[id(p)] for p in group["params"]] for group in optimizer.param_groups]
    every = [n for group in groups for n in group]
    assert sorted(every) == sorted(names.values())  # every parameter, once
    decayed = {n for group, g in zip(groups, optimizer.param_groups) if g["weight_decay"] > 0 for n in group}
    assert set(every) - decayed == no_decay_names(module.model)
    assert {"blocks.0.attn.qkv.weight", "patch_embed.proj.weight", "head.weight"} <= decayed  # sanity
    for group in optimizer.param_groups:
        assert group["weight_decay"] in (0.0, cfg.optim.weight_decay) and cfg.optim.weight_decay == 0.05
        assert group["betas"] == tuple(cfg.optim.betas) == (0.9, 0.999)


def expected_lr(step: int, peak: float, floor: float, start: float, warmup: int, total: int) -> float:
    """Linear warmup from `start` to `peak` over `warmup` steps, then a cosine from `peak` to `floor`, which the
    last of the `total` steps (step total - 1) trains at."""
    if step < warmup:
        return start + step * (peak - start) / warmup
    t = min(step - warmup, total - 1 - warmup)
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * t / (total - 1 - warmup)))


@pytest.mark.parametrize("warmup_epochs, warmup_steps", [(0.0, 0), (1.5, 15), (0.25, 2)])
def test_the_schedule_warms_up_then_decays_by_cosine_to_min_lr_per_step(warmup_epochs, warmup_steps) -> None:
    optim = {"lr": 1e-3, "weight_decay": 0.05, "betas": [0.8, 0.95], "min_lr": 1e-5, "warmup_start_lr": 1e-6}
    model = {"patch_size": 8, "embed_dim": 12, "depth": 1, "num_heads": 6, "num_classes": K}
    module = RecipeModule(
        model=model,
        optim=optim,
        label_smoothing=0.0,
        mixup={"mixup_alpha": 0.0, "cutmix_alpha": 0.0, "prob": 1.0, "switch_prob": 0.5},
        max_epochs=4,
        warmup_epochs=warmup_epochs,
        steps_per_epoch=10,
    )
    trainer = attach_trainer(module, batches=10)  # 10 steps an epoch, 40 in all
    configured = module.configure_optimizers()
    optimizer, scheduler = configured["optimizer"], configured["lr_scheduler"]["scheduler"]
    assert configured["lr_scheduler"]["interval"] == "step"
    # Off unless asked (build_module passes the run's choices): compile, fused AdamW; and seed 0.
    assert not module.hparams.compile and module.hparams.seed == 0
    assert not module.hparams.fused_adamw and not any(group["fused"] for group in optimizer.param_groups)
    assert all(group["betas"] == (0.8, 0.95) for group in optimizer.param_groups)
    for step in range(45):
        trainer.global_step = step
        module.lr_scheduler_step(scheduler)
        want = expected_lr(step, 1e-3, 1e-5, 1e-6, warmup_steps, 40)
        for group in optimizer.param_groups:
            assert group["lr"] == pytest.approx(want, rel=1e-9, abs=1e-15), f"step {step}"


@pytest.mark.parametrize(
    "batches, limit, accumulate, steps",
    [
        (10, 1.0, 1, 10),
        (10, 0.5, 1, 5),
        (10, 3, 1, 3),
        (10, 30, 1, 10),
        (10, 1.0, 3, 4),  # 3 + 3 + 3 + 1: Lightning steps on the epoch's last batch
        (2, 1.0, 4, 1),
    ],
)
def test_steps_per_epoch_follow_the_trainers_limits(batches, limit, accumulate, steps) -> None:
    module = module_for(compose_rung("patch8", ["profile=smoke", "model.depth=1"]))
    attach_trainer(module, batches=batches, limit=limit, accumulate=accumulate)
    assert module.optimizer_steps_per_epoch() == steps


def test_each_training_epoch_seeds_the_random_streams_of_mixup_and_drop_path(tiny_cfg) -> None:
    # No RNG state in the checkpoint: an epoch's MixUp/CutMix and drop-path draws are a function of
    # (seed, rank, epoch), so a run resumed at an epoch boundary draws what an uninterrupted one draws.
    module = module_for(tiny_cfg("stochastic_depth", "model.depth=1", "seed=3"))
    module.trainer = SimpleNamespace(global_rank=1, current_epoch=4)  # what the hook reads of its trainer

    def draws() -> tuple:
        return torch.rand(4), np.random.rand(2), random.random()

    torch.manual_seed(5)
    module.on_train_epoch_start()
    first = draws()
    torch.manual_seed(6), np.random.seed(6), random.seed(6)  # whatever came before: a fresh process, say
    module.on_train_epoch_start()
    again = draws()
    assert torch.equal(first[0], again[0]) and np.array_equal(first[1], again[1]) and first[2] == again[2]
    seed_epoch(3, 1, 4)
    # A contract with runs on disk: one resumed after an upgrade draws what it would have drawn before.
    value = torch.initial_seed()
    assert value == 8466065040459574885, "the hook seeds from (seed, rank, epoch)"
    assert np.array_equal(np.random.get_state()[1], np.random.RandomState(value % 2**32).get_state()[1])
    assert random.getstate() == random.Random(value).getstate()
    assert torch.equal(torch.rand(4), first[0])
    for seed, rank, epoch in ((2, 1, 4), (3, 0, 4), (3, 1, 5)):  # another seed, rank or epoch: other draws
        seed_epoch(seed, rank, epoch)
        other = draws()
        assert not torch.equal(other[0], first[0]) and not np.array_equal(other[1], first[1]) and other[2] != first[2]


def test_the_trainer_trains_the_rungs_epochs_without_sanity_steps(tiny_cfg) -> None:
    cfg = tiny_cfg("epochs200", "trainer.log_every_n_steps=7", "trainer.max_time=00:01:00:00")
    paths = RunPaths(Path(cfg.run_dir))
    marker = L.Callback()
    trainer = build_trainer(cfg, loggers=[], callbacks=[marker])
    assert trainer.max_epochs == scaled_epochs(cfg)[0] == 2  # 1% of 200 on the smoke profile
    assert trainer.num_sanity_val_steps == 0  # no validation batches before training: the RNG streams stay put
    assert trainer.precision == "32-true" and trainer.log_every_n_steps == 7
    assert marker in trainer.callbacks and trainer.default_root_dir == str(paths.root)
    timers = [c for c in trainer.callbacks if isinstance(c, Timer)]
    assert len(timers) == 1 and timers[0]._duration == 3600  # trainer.max_time: a clean stop
    assert trainer.progress_bar_callback is None and trainer.num_devices == 1  # trainer.enable_progress_bar=false


def _leaves(node, prefix=""):
    """A composed config as {dotted key: value}."""
    if isinstance(node, dict):
        return {k: v for key, child in node.items() for k, v in _leaves(child, f"{prefix}{key}.").items()}
    return {prefix[:-1]: node}


@pytest.mark.parametrize("rung", rung_names())
def test_the_laptop_profile_is_the_full_recipe_narrower_and_shorter_on_every_training_image(rung: str) -> None:
    """docs/laptop.md: the 7 x 6 model at width 48, every rung's epochs and warmup scaled by one factor, the
    study's learning rate, tracking every epoch; the data, the rest of the recipe and the analysis unchanged."""
    full, laptop = (OmegaConf.to_container(compose_rung(rung, o), resolve=True) for o in ([], ["profile=laptop"]))
    changed = {k for k, v in _leaves(laptop).items() if _leaves(full).get(k) != v}
    allowed = {"profile.name", "profile.epoch_scale", "ladder", "run_dir", "trainer.default_root_dir"}
    assert changed - allowed == {"model.embed_dim", "optim.lr", "trainer.max_epochs", "analysis.track_every_n_epochs"}
    cfg = compose_rung(rung, ["profile=laptop"])
    assert (cfg.model.depth, cfg.model.num_heads, cfg.model.embed_dim) == (7, 6, 48)
    assert cfg.data.source == "cifar10" and cfg.data.train_subset is None and cfg.analysis.track_every_n_epochs == 1
    epochs, warmup = scaled_epochs(cfg)
    assert epochs == round(full["optim"]["epochs"] * 0.06) and warmup == pytest.approx(
        full["optim"]["warmup_epochs"] * 0.06
    )
