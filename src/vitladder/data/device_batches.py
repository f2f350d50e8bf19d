"""Batches cut from a data set that lives on the training device as one uint8 tensor (airbench style): indexing,
augmentation and normalisation run where the model runs, with no DataLoader workers and no host round trip."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from dataclasses import KW_ONLY, dataclass, field

import torch
from torch import Tensor

from vitladder.data.augment import normalize, random_crop, random_flip
from vitladder.data.stats import ChannelStats


def stream_seed(*parts: object) -> int:
    """A 63-bit seed for one random stream, e.g. ``(seed, epoch, "order")``: hashing gives unrelated generators for
    neighbouring epochs and ranks, which "seed + epoch" would not (epoch 1 of seed 0 would replay epoch 0 of seed 1)."""
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


@dataclass(eq=False, repr=False)
class DeviceBatches:
    """Yields ``(images, labels)``: (B, C, H, W) float32 normalised with ``stats`` and (B,) int64, on the images'
    device; ``augment``: a random crop (``crop_padding`` 0: none) and, if ``flip``, a random flip. An epoch's order
    and augmentation are a pure function of ``(seed, epoch, rank)``, so a resumed run sees the batches an
    uninterrupted one would have. Every rank keeps ``perm[rank::world_size]`` of one permutation: training
    (``drop_last``) gives every rank as many equal batches, as DDP's all-reduce requires; evaluation visits every
    sample once over all ranks, with no padding and no collective call per step. This object is its own sampler:
    Lightning's ``set_epoch`` may come after the iterator is made (a resumed run), so the epoch is read at the first
    batch."""

    images: Tensor  # (N, C, H, W) uint8
    labels: Tensor  # (N,) int64
    batch_size: int
    _: KW_ONLY
    shuffle: bool
    augment: bool
    stats: ChannelStats
    crop_padding: int = 4
    flip: bool = True
    seed: int = 0
    drop_last: bool = False
    rank: int = 0
    world_size: int = 1
    epoch: int = field(default=0, init=False)
    batch_sampler = None  # the batches are cut here

    def __post_init__(self) -> None:
        if self.images.dtype != torch.uint8 or self.images.ndim != 4:
            raise ValueError(f"images must be (N, C, H, W) uint8, got {tuple(self.images.shape)} {self.images.dtype}")
        if self.labels.shape != self.images.shape[:1] or self.labels.device != self.images.device:
            raise ValueError("labels must be (N,) on the same device as images")
        if self.batch_size < 1 or self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(f"bad batch_size={self.batch_size}, rank={self.rank}, world_size={self.world_size}")
        n = len(self.images)
        # drop_last: the same count on every rank; otherwise this rank's share of range(rank, n, world_size).
        self.samples_per_rank = n // self.world_size if self.drop_last else len(range(self.rank, n, self.world_size))
        self.num_batches = (math.floor if self.drop_last else math.ceil)(self.samples_per_rank / self.batch_size)
        self.sampler = self  # where Lightning's set_epoch looks (lightning.fabric.utilities.data._set_sampler_epoch)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_batches

    def indices(self, epoch: int) -> Tensor:
        """(samples_per_rank,) the data set indices this rank visits in ``epoch``, in order."""
        n, device = len(self.images), self.images.device
        if self.shuffle:  # drawn on the CPU, so every rank draws the same order whatever its GPU (CUDA's may differ)
            generator = torch.Generator().manual_seed(stream_seed(self.seed, epoch, "order"))
            order = torch.randperm(n, generator=generator).to(device)
        else:
            order = torch.arange(n, device=device)
        if self.drop_last:  # cut to a multiple of world_size: every rank gets as many samples
            order = order[: self.samples_per_rank * self.world_size]
        return order[self.rank :: self.world_size]

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        indices = self.indices(self.epoch)  # a generator: read at the first batch, after Lightning's set_epoch
        seed = stream_seed(self.seed, self.epoch, "augment", self.rank)  # one per rank: each crops its shard its way
        generator = torch.Generator(self.images.device).manual_seed(seed) if self.augment else None
        for start in range(0, self.num_batches * self.batch_size, self.batch_size):
            batch = indices[start : start + self.batch_size]  # (B,)
            images = self.images[batch]  # (B, C, H, W) uint8, gathered on the device
            if generator is not None:
                images = random_crop(images, self.crop_padding, generator)  # padding 0: unchanged
                images = random_flip(images, generator) if self.flip else images
            yield normalize(images, self.stats.mean, self.stats.std), self.labels[batch]
