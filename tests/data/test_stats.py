"""The normalisation statistics: per channel, of the training split, exact whatever the chunking; read back
from a file only when they are 3 finite means and 3 positive deviations."""

from __future__ import annotations

import math

import pytest
import torch
from tiny_data import tiny_data

from vitladder.config import compose_rung
from vitladder.data.datamodule import ImageDataModule
from vitladder.data.sources.cifar10 import STATS as CIFAR10_STATS
from vitladder.data.stats import ChannelStats, channel_stats


def test_channel_stats_are_torchs_mean_and_std_per_channel_whatever_the_chunk() -> None:
    images = torch.randint(0, 256, (37, 3, 8, 8), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
    x = images.double() / 255
    mean, std = x.mean(dim=(0, 2, 3)), x.std(dim=(0, 2, 3), unbiased=False)  # (3,) each
    for chunk in (1, 5, 37, 4096):
        stats = channel_stats(images, chunk=chunk)
        assert torch.allclose(torch.tensor(stats.mean, dtype=torch.float64), mean, atol=1e-12, rtol=0)
        assert torch.allclose(torch.tensor(stats.std, dtype=torch.float64), std, atol=1e-12, rtol=0)


@pytest.mark.parametrize(
    "images",
    [
        torch.zeros(2, 3, 4, 4),  # float: already scaled, or not images
        torch.zeros(3, 4, 4, dtype=torch.uint8),  # one image without its batch dimension
        torch.zeros(0, 3, 4, 4, dtype=torch.uint8),  # no image: no statistics
    ],
    ids=["float", "3-d", "empty"],
)
def test_channel_stats_refuses_what_is_not_a_batch_of_uint8_images(images) -> None:
    with pytest.raises(ValueError, match=r"^expected \(N, C, H, W\) uint8 images with N > 0, got \("):
        channel_stats(images)


def test_a_channel_that_never_varies_keeps_a_scale_of_one() -> None:
    images = torch.full((4, 3, 2, 2), 51, dtype=torch.uint8)
    stats = channel_stats(images)
    assert stats.mean == pytest.approx((0.2, 0.2, 0.2)) and stats.std == (1.0, 1.0, 1.0)


def test_the_datamodule_normalises_with_the_training_splits_statistics(tmp_path) -> None:
    cfg = compose_rung("patch8", ["profile=smoke", f"output_root={tmp_path}", *tiny_data(300, 40, val_size=100)])
    datamodule = ImageDataModule(cfg.data)
    datamodule.setup()
    assert datamodule.stats == channel_stats(datamodule.train.images)  # the 200 images that train
    assert datamodule.stats != channel_stats(datamodule.val.images)
    images, _ = next(iter(datamodule.val_dataloader()))
    expected = datamodule.val.images[: len(images)].double() / 255 - torch.tensor(datamodule.stats.mean)[:, None, None]
    expected = expected / torch.tensor(datamodule.stats.std)[:, None, None]
    assert torch.allclose(images.double(), expected, atol=1e-5)


def test_cifar10_keeps_its_published_statistics(tmp_path, monkeypatch) -> None:
    from vitladder.data.sources import ImageSplits, cifar10

    images, labels = torch.zeros(20, 3, 32, 32, dtype=torch.uint8), torch.zeros(20, dtype=torch.int64)
    splits = ImageSplits(images, labels, images, labels, ("a",), official_test_order=True, stats=CIFAR10_STATS)
    monkeypatch.setattr(cifar10, "load_cifar10", lambda *args, **kwargs: splits)
    overrides = ["data=cifar10", f"data.root={tmp_path}", "data.val_size=5", "data.batch_size=5"]
    datamodule = ImageDataModule(compose_rung("patch8", ["profile=smoke", f"output_root={tmp_path}", *overrides]).data)
    datamodule.setup()
    assert datamodule.stats is CIFAR10_STATS  # not those of these blank images


MEAN_WRONG = "normalisation mean is not 3 finite numbers"
STD_WRONG = "normalisation std is not 3 finite numbers above 0"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([0.5, 0.5, 0.5], "normalisation is not a mapping of mean and std"),
        ({"mean": [0.5, 0.5], "std": [0.2, 0.2, 0.2]}, MEAN_WRONG),
        ({"mean": [0.5, 0.5, math.nan], "std": [0.2, 0.2, 0.2]}, MEAN_WRONG),
        ({"mean": [0.5, 0.5, 0.5], "std": [0.2, 0.0, 0.2]}, STD_WRONG),
        ({"mean": [0.5, 0.5, 0.5], "std": [0.2, True, 0.2]}, STD_WRONG),
        ({"mean": ["0.5", 0.5, 0.5], "std": [0.2, 0.2, 0.2]}, MEAN_WRONG),
        ({"mean": [0.5, 0.5, 0.5]}, STD_WRONG),
    ],
)
def test_statistics_from_a_file_are_checked(raw, message) -> None:
    with pytest.raises(ValueError) as error:
        ChannelStats.from_dict(raw)
    assert str(error.value) == message  # the one line a user sees, naming what is wrong


def test_statistics_round_trip_through_their_dict() -> None:
    stats = ChannelStats((0.1, 0.2, 0.3), (0.4, 0.5, 0.6))
    assert ChannelStats.from_dict(stats.to_dict()) == stats
