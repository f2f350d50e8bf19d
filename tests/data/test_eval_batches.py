"""What the datamodule hands each stage: training batches augmented as the rung asks, validation and
test batches always the plain normalised images, every one once, in the split's order."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from vitladder.config import compose_rung
from vitladder.data.augment import normalize
from vitladder.data.datamodule import ImageDataModule
from vitladder.errors import UserError


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


def test_a_batch_as_large_as_the_training_split_is_one_step_and_a_larger_one_is_refused(tmp_path) -> None:
    dm = datamodule("patch8", tmp_path, "data.batch_size=60")  # 90 images, 30 held out: 60 train
    assert dm.steps_per_epoch == 1 and [len(labels) for _, labels in dm.train_dataloader()] == [60]
    with pytest.raises(UserError) as refused:  # drop_last would leave no training batch at all
        datamodule("patch8", tmp_path, "data.batch_size=61")
    assert str(refused.value) == (
        "data.batch_size=61 is larger than the training split (60 images): lower data.batch_size"
    )


def test_a_datamodule_given_no_seed_takes_the_configs_default_seed(tmp_path) -> None:
    cfg = compose_rung("patch8", ["profile=smoke", f"output_root={tmp_path}"])
    assert ImageDataModule(cfg.data).seed == cfg.seed == 0


def test_setup_puts_every_split_on_the_trainers_device(tmp_path) -> None:
    def devices(dm: ImageDataModule) -> set[str]:
        return {t.device.type for split in (dm.train, dm.val, dm.test) for t in (split.images, split.labels)}

    dm = datamodule("patch8", tmp_path)  # set up before the trainer exists, as run.py does: on the host
    assert devices(dm) == {"cpu"}
    # The meta device stands in for a GPU: the splits must move to whatever device the trainer's strategy holds.
    dm.trainer = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device("meta")))
    dm.setup("fit")
    assert devices(dm) == {"meta"}
