"""What the datamodule hands each stage: training batches augmented as the rung asks, validation and
test batches always the plain normalised images, every one once, in the split's order."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from vitladder.config import compose_rung
from vitladder.data.augment import normalize
from vitladder.data.datamodule import ImageDataModule


def datamodule(rung: str, tmp_path, *overrides: str) -> ImageDataModule:
    cfg = compose_rung(
        rung,
        [
            "profile=smoke",
            "data=synthetic",
            "data.num_train=90",
            "data.num_test=50",
            "data.val_size=30",
            "data.train_subset=null",
            "data.test_subset=null",
            "data.batch_size=16",
            "seed=3",
            f"output_root={tmp_path}",
            *overrides,
        ],
    )
    module = ImageDataModule(cfg.data, seed=int(cfg.seed))
    module.setup()
    return module


def concat(batches) -> tuple[torch.Tensor, torch.Tensor]:
    images, labels = zip(*batches)
    return torch.cat(images), torch.cat(labels)


@pytest.mark.parametrize("rung", ["augment", "mixup_cutmix"])
def test_validation_and_test_batches_are_never_augmented(rung: str, tmp_path) -> None:
    dm = datamodule(rung, tmp_path)
    assert dm.cfg.random_crop_padding > 0 and dm.cfg.horizontal_flip  # the rung augments its training batches
    for loader, split in ((dm.val_dataloader(), dm.val), (dm.test_dataloader(), dm.test)):
        for epoch in (0, 4):  # the same whatever the epoch
            loader.set_epoch(epoch)
            images, labels = concat(loader)
            assert torch.equal(labels, split.labels)  # every image once, in order, the last batch kept
            assert torch.equal(images, normalize(split.images, dm.stats.mean, dm.stats.std)), (
                "augmentation reached an evaluation batch"
            )


@pytest.mark.parametrize(
    "rung, overrides, augmented",
    [
        ("patch8", [], False),
        ("augment", [], True),
        ("patch8", ["data.random_crop_padding=1"], True),  # a crop alone, however small
        ("patch8", ["data.horizontal_flip=true"], True),  # a flip alone
    ],
)
def test_training_batches_are_augmented_only_when_the_config_asks(rung, overrides, augmented, tmp_path) -> None:
    dm = datamodule(rung, tmp_path, *overrides)
    loader = dm.train_dataloader()
    assert loader.seed == 3  # the run's seed drives the order and the augmentation
    images, labels = concat(loader)
    order = loader.indices(0)[: len(labels)]
    assert torch.equal(labels, dm.train.labels[order])
    plain = normalize(dm.train.images[order], dm.stats.mean, dm.stats.std)
    assert torch.equal(images, plain) is not augmented
    assert len(labels) == len(dm.train.labels) // 16 * 16  # even, full batches for MixUp


def test_training_batches_take_the_rungs_augmentation_and_this_processs_share(tmp_path) -> None:
    dm = datamodule("augment", tmp_path, "data.random_crop_padding=2", "data.horizontal_flip=false")
    train = dm.train_dataloader()
    assert (train.augment, train.crop_padding, train.flip, train.seed) == (True, 2, False, 3)
    assert (train.rank, train.world_size, train.batch_size) == (0, 1, 16)
    dm.trainer = SimpleNamespace(global_rank=1, world_size=2)  # the second of two processes
    train, val = dm.train_dataloader(), dm.val_dataloader()
    assert (train.rank, train.world_size, train.batch_size) == (1, 2, 8)  # half of the global batch
    assert (val.rank, val.world_size) == (1, 2)


def test_evaluation_takes_batches_of_its_own_size_shared_over_the_devices(tmp_path) -> None:
    dm = datamodule("mixup_cutmix", tmp_path, "data.eval_batch_size=25")
    assert [len(labels) for _, labels in dm.val_dataloader()] == [25, 5]  # 30 images, the last batch kept
    assert dm.train_dataloader().batch_size == 16
    dm.trainer = SimpleNamespace(global_rank=0, world_size=3)  # an odd share is fine: nothing mixes here
    val, test = dm.val_dataloader(), dm.test_dataloader()
    assert (val.batch_size, test.batch_size) == (8, 8)
    dm = datamodule("patch8", tmp_path, "data.eval_batch_size=2")
    dm.trainer = SimpleNamespace(global_rank=2, world_size=3)  # fewer images a batch than devices
    assert dm.val_dataloader().batch_size == 1, "each device takes batches of one, not of none"
