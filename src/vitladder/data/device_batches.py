"""Batches cut from a dataset that lives on the training device as one uint8 tensor (airbench style).

No DataLoader workers and no host round trip: indexing, augmentation and normalisation all run
where the model runs, so a GPU is never left waiting on Python. The order and the augmentation of
an epoch are a pure function of ``(seed, epoch)``, so a resumed run sees the very same batches.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator

import torch
from torch import Tensor

from vitladder.data.augment import normalize, random_crop, random_flip
from vitladder.data.stats import ChannelStats


def stream_seed(*parts: object) -> int:
    """A 63-bit seed for one random stream, e.g. ``(seed, epoch, "order")``.

    Hashing gives unrelated generators for neighbouring epochs and ranks, which "seed + epoch" would
    not (epoch 1 of seed 0 would replay epoch 0 of seed 1)."""
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


class DeviceBatches:
    """Iterates a dataset held as one uint8 tensor on the training device, batch by batch.

    Yields ``(images, labels)``: (B, 3, H, W) float32 normalised and (B,) int64 on the images'
    device, normalised with ``stats``. ``augment`` turns on a random crop (``crop_padding`` 0: none) and, if
    ``flip``, a random horizontal flip.

    With several ranks, every rank draws the same permutation and keeps ``perm[rank::world_size]``.
    Training (``drop_last=True``) cuts the permutation to a multiple of ``world_size`` and drops a rank's
    last, incomplete batch, so every rank takes the same number of equal batches, as DDP's gradient
    all-reduce requires. Evaluation (``drop_last=False``) visits every sample exactly once over all
    ranks: no wrap-around padding, so a rank may hold one sample (and one batch) fewer than another.
    That is safe because an evaluation step makes no collective call (the model has no buffers to
    broadcast); metrics are synchronised once, at the end of the epoch.

    An iteration yields the epoch last given to :meth:`set_epoch`, read at its first batch. Lightning calls
    ``loader.sampler.set_epoch(epoch)`` at the start of every training epoch (``sampler`` is this object), on
    a resumed run too; it creates a resumed run's iterator before that call, which is why the epoch is read
    lazily, at the first batch.
    """

    def __init__(
        self,
        images: Tensor,
        labels: Tensor,
        batch_size: int,
        *,
        shuffle: bool,
        augment: bool,
        crop_padding: int = 4,
        flip: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        rank: int = 0,
        world_size: int = 1,
        stats: ChannelStats,
    ) -> None:
        if images.dtype != torch.uint8 or images.ndim != 4:
            raise ValueError(f"images must be (N, C, H, W) uint8, got {tuple(images.shape)} {images.dtype}")
        if labels.shape != images.shape[:1] or labels.device != images.device:
            raise ValueError("labels must be (N,) on the same device as images")
        if batch_size < 1 or world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"bad batch_size={batch_size}, rank={rank}, world_size={world_size}")
        self.images = images  # (N, C, H, W) uint8
        self.labels = labels  # (N,) int64
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.augment = augment
        self.crop_padding = crop_padding
        self.flip = flip
        self.seed = seed
        self.drop_last = drop_last
        self.rank = rank
        self.world_size = world_size
        self.epoch = 0
        self.stats = stats

        n = images.shape[0]
        # drop_last: the same count on every rank; otherwise this rank's share of range(rank, n, world_size).
        self.samples_per_rank = n // world_size if drop_last else len(range(rank, n, world_size))
        self.num_batches = (
            self.samples_per_rank // batch_size if drop_last else math.ceil(self.samples_per_rank / batch_size)
        )

    def set_epoch(self, epoch: int) -> None:
        """The next iteration (from its first batch on) yields epoch ``epoch``'s order and augmentation."""
        self.epoch = epoch

    @property
    def sampler(self) -> DeviceBatches:
        """Where Lightning's set_epoch protocol looks (lightning.fabric.utilities.data._set_sampler_epoch): this
        object decides the order, so it is its own sampler (and has no separate batch sampler)."""
        return self

    batch_sampler = None

    def __len__(self) -> int:
        return self.num_batches

    def indices(self, epoch: int) -> Tensor:
        """(samples_per_rank,) dataset indices this rank visits in ``epoch``, in order."""
        n, device = self.images.shape[0], self.images.device
        if self.shuffle:
            # Drawn on the CPU, so every rank draws the same order whatever its GPU (CUDA's randperm may
            # differ between GPU models), then moved once per epoch.
            generator = torch.Generator().manual_seed(stream_seed(self.seed, epoch, "order"))
            order = torch.randperm(n, generator=generator).to(device)
        else:
            order = torch.arange(n, device=device)
        if self.drop_last:  # cut to a multiple of world_size: every rank gets as many samples
            order = order[: self.samples_per_rank * self.world_size]
        return order[self.rank :: self.world_size]

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        # A generator: self.epoch is read at the first batch, after Lightning's set_epoch.
        yield from self._batches(self.epoch)

    def _batches(self, epoch: int) -> Iterator[tuple[Tensor, Tensor]]:
        indices = self.indices(epoch)
        generator = None
        if self.augment:  # one stream per rank: ranks must not crop their shards identically
            generator = torch.Generator(device=self.images.device)
            generator.manual_seed(stream_seed(self.seed, epoch, "augment", self.rank))
        for start in range(0, self.num_batches * self.batch_size, self.batch_size):
            batch = indices[start : start + self.batch_size]  # (B,)
            images = self.images[batch]  # (B, C, H, W) uint8, gathered on the device
            if generator is not None:
                images = random_crop(images, self.crop_padding, generator)  # padding 0: unchanged
                if self.flip:
                    images = random_flip(images, generator)
            yield normalize(images, self.stats.mean, self.stats.std), self.labels[batch]
