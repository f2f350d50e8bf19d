"""The LightningDataModule: loads a source once per process, splits it, and keeps it on the training device."""

from __future__ import annotations

from dataclasses import dataclass

import lightning as L
import torch
from omegaconf import DictConfig

from vitladder.data import sources
from vitladder.data.device_batches import DeviceBatches
from vitladder.data.sources import ImageSplits
from vitladder.data.stats import ChannelStats, channel_stats
from vitladder.errors import DataError, UserError


def per_device_batch(batch_size: int, world_size: int, even: bool = False) -> int:
    """Each of ``world_size`` processes takes an equal share of ``data.batch_size``, the global batch, so the steps
    per epoch, the warmup and the learning rate are the recipe's on any number of devices. ``even``: each share must
    be even too (timm's MixUp/CutMix pairs every image with another of its batch)."""
    step = world_size * (2 if even else 1)
    if batch_size >= 1 and batch_size % step == 0:
        return batch_size // world_size
    if batch_size >= 1 and batch_size % world_size == 0:
        where = "" if world_size == 1 else f" on {world_size} devices"
        problem = f"gives {batch_size // world_size} images per device{where}, and MixUp/CutMix needs an even batch"
    else:
        problem = f"is the global batch and must split evenly over {world_size} devices"
        problem += " into even batches (MixUp/CutMix)" if even else ""
    fits = max(step, batch_size - batch_size % step)
    raise UserError(f"data.batch_size={batch_size} {problem}: choose a multiple of {step}, e.g. data.batch_size={fits}")


@dataclass(frozen=True)
class Split:
    images: torch.Tensor  # (N, 3, S, S) uint8
    labels: torch.Tensor  # (N,) int64


def split_train_val_test(
    splits: ImageSplits, val_size: int, split_seed: int, train_subset: int | None, test_subset: int | None
) -> tuple[Split, Split, Split]:
    """Holds out a seeded validation set from train (``val_size`` 0: none). A test set without an official order is
    shuffled once by the same generator, so that its first N are a fixed sample of every class."""
    generator = torch.Generator().manual_seed(split_seed)
    order = torch.randperm(len(splits.train_labels), generator=generator)
    if val_size >= len(order):
        raise DataError(f"data.val_size={val_size} leaves no training images out of {len(order)}")
    train, val = order[val_size:][: train_subset or None], order[:val_size]
    n_test = len(splits.test_labels)
    test = torch.arange(n_test) if splits.official_test_order else torch.randperm(n_test, generator=generator)
    test = test[: test_subset or None]
    return (
        Split(splits.train_images[train], splits.train_labels[train]),
        Split(splits.train_images[val], splits.train_labels[val]),
        Split(splits.test_images[test], splits.test_labels[test]),
    )


class ImageDataModule(L.LightningDataModule):
    """Train / validation / test splits held as uint8 tensors on the training device, cut into batches there by
    DeviceBatches; ``stats`` (after ``setup``): the source's, else the training split's."""

    def __init__(self, data_cfg: DictConfig, seed: int = 0) -> None:
        super().__init__()
        self.cfg, self.seed = data_cfg, seed
        self.splits: ImageSplits | None = None  # the source's images
        self.stats: ChannelStats | None = None
        self.train = self.val = self.test = None  # Splits

    classes = property(lambda self: self.splits.classes)
    num_classes = property(lambda self: len(self.splits.classes))
    image_size = property(lambda self: self.splits.image_size)

    @property
    def steps_per_epoch(self) -> int:
        """Whole global batches of the training split (drop_last), on any number of devices."""
        return len(self.train.labels) // int(self.cfg.batch_size)

    def prepare_data(self) -> None:
        # Downloads (CIFAR-10) or decodes and caches (image folders) on one process per machine; the process keeps
        # what it loaded, so its setup does not load again.
        sources.load(self.cfg)

    def setup(self, stage: str | None = None) -> None:
        if self.splits is None:  # the first call: run.py sets up before the trainer exists, to fail early
            cfg, splits = self.cfg, sources.load(self.cfg)
            train, val, test = split_train_val_test(
                splits, int(cfg.val_size), int(cfg.split_seed), cfg.train_subset, cfg.test_subset
            )
            if int(cfg.batch_size) > len(train.labels):  # drop_last would leave no training batch at all
                raise UserError(
                    f"data.batch_size={int(cfg.batch_size)} is larger than the training split "
                    f"({len(train.labels)} images): lower data.batch_size"
                )
            self.splits, self.stats = splits, splits.stats or channel_stats(train.images)  # the images that train
            self.train, self.val, self.test = train, val, test
        device = self.trainer.strategy.root_device if self.trainer is not None else torch.device("cpu")
        self.train, self.val, self.test = (
            Split(s.images.to(device), s.labels.to(device)) for s in (self.train, self.val, self.test)
        )

    def facts(self) -> dict:
        """What the run's data are, for done.json and every report."""
        return {
            "data": self.splits.origin,
            "train_images": len(self.train.labels),
            "val_images": len(self.val.labels),
            "test_images": len(self.test.labels),
            "test_order": "official" if self.splits.official_test_order else "seeded",
        }

    def _batches(self, split: Split, train: bool) -> DeviceBatches:
        rank, world_size = (0, 1) if self.trainer is None else (self.trainer.global_rank, self.trainer.world_size)
        crop, flip = int(self.cfg.random_crop_padding), bool(self.cfg.horizontal_flip)
        eval_batch = max(1, int(self.cfg.eval_batch_size) // world_size)  # each device's share; no batch is dropped
        return DeviceBatches(
            split.images,
            split.labels,
            per_device_batch(int(self.cfg.batch_size), world_size) if train else eval_batch,
            shuffle=train,
            augment=train and (crop > 0 or flip),
            stats=self.stats,
            crop_padding=crop,
            flip=flip,
            seed=self.seed,
            drop_last=train,  # MixUp needs even, equal batches
            rank=rank,
            world_size=world_size,
        )

    def train_dataloader(self) -> DeviceBatches:
        return self._batches(self.train, train=True)

    def val_dataloader(self) -> DeviceBatches:
        return self._batches(self.val, train=False)

    def test_dataloader(self) -> DeviceBatches:
        return self._batches(self.test, train=False)
