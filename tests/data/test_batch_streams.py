"""DeviceBatches' random streams: the augmentation, like the order, is a function of (seed, epoch,
rank), so a run is reproducible, epochs and seeds differ, and DDP ranks do not crop alike."""

from __future__ import annotations

import pytest
import torch

from vitladder.data.augment import normalize
from vitladder.data.device_batches import DeviceBatches
from vitladder.data.sources.cifar10 import STATS as CIFAR10_STATS


def augmented(images: torch.Tensor, seed: int = 0, epoch: int = 0, rank: int = 0, world_size: int = 1) -> torch.Tensor:
    """The epoch's augmented images in file order (no shuffle): only the augmentation varies."""
    batches = DeviceBatches(
        images,
        torch.arange(len(images)),
        8,
        shuffle=False,
        augment=True,
        crop_padding=4,
        flip=True,
        seed=seed,
        rank=rank,
        world_size=world_size,
        stats=CIFAR10_STATS,
    )
    batches.set_epoch(epoch)
    return torch.cat([x for x, _ in batches])


@pytest.fixture(scope="module")
def images() -> torch.Tensor:
    return torch.randint(0, 256, (16, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))


def test_the_augmentation_is_reproducible_and_changes_with_seed_and_epoch(images: torch.Tensor) -> None:
    reference = augmented(images, seed=0, epoch=2)
    assert torch.equal(reference, augmented(images, seed=0, epoch=2))
    assert not torch.equal(reference, normalize(images, CIFAR10_STATS.mean, CIFAR10_STATS.std))
    assert not torch.equal(reference, augmented(images, seed=1, epoch=2))
    assert not torch.equal(reference, augmented(images, seed=0, epoch=3))


def test_ranks_augment_their_shards_differently() -> None:
    same = torch.randint(0, 256, (1, 3, 32, 32), dtype=torch.uint8).expand(16, 3, 32, 32).contiguous()
    # Every image is the same, so the two shards differ only by their augmentation.
    assert not torch.equal(augmented(same, rank=0, world_size=2), augmented(same, rank=1, world_size=2))


def test_one_sample_is_evaluated_once_over_two_ranks() -> None:
    images, labels = torch.zeros(1, 3, 4, 4, dtype=torch.uint8), torch.zeros(1, dtype=torch.long)
    counts = [
        [
            len(y)
            for _, y in DeviceBatches(
                images, labels, 4, shuffle=False, augment=False, rank=rank, world_size=2, stats=CIFAR10_STATS
            )
        ]
        for rank in range(2)
    ]
    assert counts == [[1], []]  # no wrap-around padding: the image is counted once, not twice


def test_batches_of_one_are_allowed_and_bad_arguments_are_named() -> None:
    images, labels = torch.zeros(3, 3, 4, 4, dtype=torch.uint8), torch.arange(3)
    assert [len(y) for _, y in DeviceBatches(images, labels, 1, shuffle=False, augment=False, stats=CIFAR10_STATS)] == [
        1,
        1,
        1,
    ]
    with pytest.raises(ValueError, match=r"^bad batch_size=0, rank=0, world_size=1$"):
        DeviceBatches(images, labels, 0, shuffle=False, augment=False, stats=CIFAR10_STATS)
    with pytest.raises(ValueError, match=r"^images must be \(N, C, H, W\) uint8, got \(3, 3, 4, 4\) torch.float32$"):
        DeviceBatches(images.float(), labels, 1, shuffle=False, augment=False, stats=CIFAR10_STATS)
    with pytest.raises(ValueError, match=r"^labels must be \(N,\) on the same device as images$"):
        DeviceBatches(images, labels[:2], 1, shuffle=False, augment=False, stats=CIFAR10_STATS)
