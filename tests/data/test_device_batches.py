"""DeviceBatches: epoch coverage, reproducible order and augmentation, equal rank shards."""

from __future__ import annotations

import hashlib
import struct

import pytest
import torch

from vitladder.data.augment import normalize, random_crop, random_flip
from vitladder.data.device_batches import DeviceBatches, stream_seed
from vitladder.data.sources.cifar10 import STATS as CIFAR10_STATS


def dataset(n: int, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Random uint8 images whose labels are their own indices, so batches reveal what they hold."""
    generator = torch.Generator().manual_seed(n)
    images = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=generator)
    return images.to(device), torch.arange(n, device=device)


def visited(batches: DeviceBatches) -> list[int]:
    return [i for _, labels in batches for i in labels.tolist()]


def test_batches_are_normalised_images_of_their_labels() -> None:
    images, labels = dataset(10)
    out = list(DeviceBatches(images, labels, 4, shuffle=True, augment=False, stats=CIFAR10_STATS))
    assert [len(y) for _, y in out] == [4, 4, 2]
    for x, y in out:
        assert x.dtype == torch.float32 and x.shape[1:] == (3, 32, 32) and y.dtype == torch.int64
        assert torch.equal(x, normalize(images[y], CIFAR10_STATS.mean, CIFAR10_STATS.std))


@pytest.mark.parametrize("shuffle", [False, True])
def test_every_index_once_per_epoch(shuffle: bool) -> None:
    images, labels = dataset(103)
    batches = DeviceBatches(images, labels, 16, shuffle=shuffle, augment=True, stats=CIFAR10_STATS)
    for epoch in range(3):
        batches.set_epoch(epoch)
        order = visited(batches)
        assert sorted(order) == list(range(103))
        assert (order == list(range(103))) is not shuffle


def test_same_seed_and_epoch_give_the_same_batches() -> None:
    images, labels = dataset(50)

    def epoch_batches(seed: int, epoch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        batches = DeviceBatches(images, labels, 8, shuffle=True, augment=True, seed=seed, stats=CIFAR10_STATS)
        batches.set_epoch(epoch)
        return list(batches)

    def same(a: list, b: list) -> bool:
        return all(torch.equal(xa, xb) and torch.equal(ya, yb) for (xa, ya), (xb, yb) in zip(a, b))

    reference = epoch_batches(seed=0, epoch=5)
    assert same(reference, epoch_batches(seed=0, epoch=5))  # a resumed run replays it exactly

    def order(batches: list[tuple[torch.Tensor, torch.Tensor]]) -> list[int]:
        return torch.cat([y for _, y in batches]).tolist()

    assert order(reference) != order(epoch_batches(seed=0, epoch=6))  # another epoch, another order
    assert order(reference) != order(epoch_batches(seed=1, epoch=5))
    assert not same(reference, epoch_batches(seed=0, epoch=6))

    # Same order but different augmentation is also caught: compare with augmentation off.
    plain = DeviceBatches(images, labels, 8, shuffle=True, augment=False, seed=0, stats=CIFAR10_STATS)
    plain.set_epoch(5)
    plain_batches = list(plain)
    assert all(torch.equal(ya, yb) for (_, ya), (_, yb) in zip(reference, plain_batches))
    assert not all(torch.equal(xa, xb) for (xa, _), (xb, _) in zip(reference, plain_batches))


@pytest.mark.parametrize("crop_padding, flip", [(4, False), (0, True)])
def test_crop_and_flip_can_be_used_alone(crop_padding: int, flip: bool) -> None:
    images, labels = dataset(64)
    batches = DeviceBatches(
        images, labels, 64, shuffle=False, augment=True, crop_padding=crop_padding, flip=flip, stats=CIFAR10_STATS
    )
    x, _ = next(iter(batches))
    plain = normalize(images, CIFAR10_STATS.mean, CIFAR10_STATS.std)
    unchanged = (x == plain).flatten(1).all(1)
    mirrored = (x == plain.flip(-1)).flatten(1).all(1)
    if flip:  # no crop: every image is itself or its mirror, and both happen
        assert bool((unchanged | mirrored).all()) and 0 < int(mirrored.sum()) < 64
    else:  # no flip: no image is mirrored (images are random, so a crop never looks like a mirror)
        assert not bool(mirrored.any()) and not bool(unchanged.all())


def test_the_epoch_set_last_is_the_one_iterated() -> None:
    images, labels = dataset(40)
    batches = DeviceBatches(images, labels, 8, shuffle=True, augment=False, seed=3, stats=CIFAR10_STATS)
    first = visited(batches)
    assert visited(batches) == first  # iterating twice replays the epoch: the trainer sets the next one
    batches.set_epoch(1)
    assert visited(batches) != first


@pytest.mark.parametrize(
    "n, batch_size, drop_last",
    [(10, 4, False), (10, 4, True), (12, 4, True), (3, 8, False), (3, 8, True), (0, 4, False)],
)
def test_len_matches_iteration(n: int, batch_size: int, drop_last: bool) -> None:
    images, labels = dataset(n)
    batches = DeviceBatches(
        images, labels, batch_size, shuffle=True, augment=True, drop_last=drop_last, stats=CIFAR10_STATS
    )
    sizes = [len(y) for _, y in batches]
    assert len(sizes) == len(batches)
    if drop_last:
        assert all(size == batch_size for size in sizes)
    else:
        assert sum(sizes) == n


@pytest.mark.parametrize("n, world_size", [(100, 4), (103, 4), (7, 3), (97, 3), (2, 3)])
def test_training_shards_are_equal_and_disjoint(n: int, world_size: int) -> None:
    images, labels = dataset(n)
    shards = []
    for rank in range(world_size):
        batches = DeviceBatches(
            images,
            labels,
            8,
            shuffle=True,
            augment=False,
            seed=7,
            drop_last=True,
            rank=rank,
            world_size=world_size,
            stats=CIFAR10_STATS,
        )
        batches.set_epoch(2)
        shards.append(visited(batches))
        assert len(list(batches)) == len(batches)
    assert len({len(shard) for shard in shards}) == 1  # DDP's gradient all-reduce needs as many batches per rank
    everything = [i for shard in shards for i in shard]
    assert len(set(everything)) == len(everything) >= n - world_size * 8  # cut, never repeated


@pytest.mark.parametrize("n, world_size", [(100, 4), (103, 4), (7, 3), (97, 3), (2, 3), (129, 2)])
def test_evaluation_shards_visit_every_sample_exactly_once(n: int, world_size: int) -> None:
    # No wrap-around padding: a duplicated image would count twice in val/acc and test/acc.
    images, labels = dataset(n)
    shards = []
    for rank in range(world_size):
        batches = DeviceBatches(
            images, labels, 16, shuffle=False, augment=False, rank=rank, world_size=world_size, stats=CIFAR10_STATS
        )
        shards.append(visited(batches))
        assert len(list(batches)) == len(batches)
    assert sorted(i for shard in shards for i in shard) == list(range(n))
    assert max(map(len, shards)) - min(map(len, shards)) <= 1


def test_rejects_wrong_inputs() -> None:
    images, labels = dataset(4)
    with pytest.raises(ValueError):
        DeviceBatches(images.float(), labels, 2, shuffle=False, augment=False, stats=CIFAR10_STATS)
    with pytest.raises(ValueError):
        DeviceBatches(images, labels[:3], 2, shuffle=False, augment=False, stats=CIFAR10_STATS)
    with pytest.raises(ValueError):
        DeviceBatches(images, labels, 2, shuffle=False, augment=False, rank=2, world_size=2, stats=CIFAR10_STATS)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_cuda_batches_stay_on_device_without_host_syncs_per_batch() -> None:
    images, labels = dataset(1000, "cuda")
    batches = DeviceBatches(images, labels, 64, shuffle=True, augment=True, stats=CIFAR10_STATS)
    list(batches)  # warm-up: one-off constants are copied to the device once
    iterator = iter(batches)
    out = [next(iterator)]  # the epoch's permutation is drawn here, once per epoch
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # from now on any device-to-host sync raises
    try:
        out += list(iterator)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert len(out) == len(batches) and all(x.is_cuda and y.is_cuda for x, y in out)


def test_lightnings_set_epoch_protocol_reaches_an_iterator_made_before_it() -> None:
    """Lightning calls ``loader.sampler.set_epoch(e)`` at each training epoch's start, and on a resumed run
    only after it has created the iterator: that iterator must still yield epoch e."""
    from lightning.fabric.utilities.data import _set_sampler_epoch

    images, labels = dataset(40)
    batches = DeviceBatches(images, labels, 8, shuffle=True, augment=True, seed=3, stats=CIFAR10_STATS)
    expected = list(zip(*[iter(batches.indices(5).tolist())] * 8))  # epoch 5's batches of 8 indices
    iterator = iter(batches)  # as Lightning's fit loop does before set_epoch when it resumes
    _set_sampler_epoch(batches, 5)
    assert [tuple(y.tolist()) for _, y in iterator] == expected


def test_batches_are_normalised_with_the_statistics_given() -> None:
    from vitladder.data.stats import ChannelStats

    images, labels = dataset(6)
    stats = ChannelStats((0.1, 0.5, 0.9), (0.2, 0.3, 0.4))
    x, y = next(iter(DeviceBatches(images, labels, 6, shuffle=False, augment=False, stats=stats)))
    assert torch.equal(x, normalize(images[y], stats.mean, stats.std))


def test_stream_seeds_are_the_documented_63_bit_hash_so_a_seed_replays_in_every_version() -> None:
    # blake2b-64 of the parts joined by "/", read little-endian, top bit cleared: another derivation would
    # give every seed other batches, crops and MixUp draws than the runs already made
    for parts in [(0, 0, "order"), (1, 3, "augment"), (7, 0, 2, "global"), ("x",)]:
        (expected,) = struct.unpack("<Q", hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest())
        assert stream_seed(*parts) == expected % 2**63, parts
    seeds = [stream_seed(0, epoch, "order") for epoch in range(64)]
    assert all(0 <= seed < 2**63 for seed in seeds) and max(seeds) >= 2**62 and any(seed % 2 for seed in seeds)


def test_an_epochs_order_is_the_seeds_order_stream_and_no_other() -> None:
    images, labels = torch.zeros(20, 3, 4, 4, dtype=torch.uint8), torch.arange(20)
    batches = DeviceBatches(images, labels, 5, shuffle=True, augment=False, seed=9, stats=CIFAR10_STATS)
    expected = torch.randperm(20, generator=torch.Generator().manual_seed(stream_seed(9, 2, "order")))
    assert torch.equal(batches.indices(2), expected)
    assert not torch.equal(batches.indices(3), expected)


def test_an_epochs_crops_and_flips_are_the_seeds_augment_stream_for_its_rank_and_no_other() -> None:
    images, labels = dataset(12)
    batches = DeviceBatches(
        images, labels, 6, shuffle=False, augment=True, seed=9, rank=1, world_size=2, stats=CIFAR10_STATS
    )
    batches.set_epoch(2)
    x, y = next(iter(batches))  # rank 1's share: images 1, 3, ..., 11
    generator = torch.Generator().manual_seed(stream_seed(9, 2, "augment", 1))
    expected = random_flip(random_crop(images[y], 4, generator), generator)
    assert torch.equal(x, normalize(expected, CIFAR10_STATS.mean, CIFAR10_STATS.std))


def test_the_order_is_drawn_on_the_cpu_whatever_the_device_then_moved_there(monkeypatch) -> None:
    # Every rank must draw the same order: CUDA's randperm may differ between GPU models, the CPU's does not.
    # The meta device stands for one that is not the CPU (it has no random generator at all).
    drawn = []
    randperm = torch.randperm

    def recorded(n, *, generator=None, **kwargs):
        drawn.append((generator.device.type, kwargs.get("device")))
        return randperm(n, generator=generator, **kwargs)

    monkeypatch.setattr(torch, "randperm", recorded)
    images = torch.zeros(20, 3, 4, 4, dtype=torch.uint8, device="meta")
    batches = DeviceBatches(
        images, torch.zeros(20, dtype=torch.long, device="meta"), 5, shuffle=True, augment=False, stats=CIFAR10_STATS
    )
    assert batches.indices(2).device.type == "meta" and drawn == [("cpu", None)]


def test_defaults_are_the_recipes_crop_flip_and_seed() -> None:
    batches = DeviceBatches(
        torch.zeros(4, 3, 4, 4, dtype=torch.uint8), torch.arange(4), 2, shuffle=False, augment=True, stats=CIFAR10_STATS
    )
    assert (batches.crop_padding, batches.flip, batches.seed, batches.drop_last) == (4, True, 0, False)


@pytest.mark.parametrize(("drop_last", "shares"), [(True, [5, 5]), (False, [6, 5])])
def test_two_ranks_share_an_odd_split(drop_last: bool, shares: list[int]) -> None:
    """Training cuts 11 images to 10, 5 per rank; evaluation visits all 11, one rank taking the odd one."""
    images, labels = torch.zeros(11, 3, 4, 4, dtype=torch.uint8), torch.arange(11)
    ranks = [
        DeviceBatches(
            images,
            labels,
            2,
            shuffle=True,
            augment=False,
            seed=4,
            drop_last=drop_last,
            rank=r,
            world_size=2,
            stats=CIFAR10_STATS,
        )
        for r in (0, 1)
    ]
    seen = [batches.indices(1) for batches in ranks]
    assert [len(s) for s in seen] == [b.samples_per_rank for b in ranks] == shares
    assert not set(seen[0].tolist()) & set(seen[1].tolist())
    assert len(set(torch.cat(seen).tolist())) == sum(shares)
    assert [len(b) for b in ranks] == ([2, 2] if drop_last else [3, 3])
