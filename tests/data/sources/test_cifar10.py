"""data=cifar10: torchvision's CIFAR-10, its download errors, its layout and its official test order."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch

from vitladder.data.sources import ImageSplits
from vitladder.data.sources.cifar10 import load_cifar10
from vitladder.errors import DataError


def test_cifar10_without_network_is_one_helpful_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(*args: object, **kwargs: object) -> None:
        raise urllib.error.URLError("[Errno -2] Name or service not known")

    monkeypatch.setattr(urllib.request, "urlopen", offline)  # fast and deterministic, network or not
    timeout_before = socket.getdefaulttimeout()
    with pytest.raises(DataError) as info:
        load_cifar10(tmp_path / "data")
    message = str(info.value)
    assert "\n" not in message
    assert "could not download CIFAR-10" in message and str(tmp_path / "data") in message
    assert "data.root=" in message and "data=imagefolder" in message
    assert socket.getdefaulttimeout() == timeout_before  # the download timeout was restored


class FakeCIFAR10:
    """Stands in for torchvision's CIFAR10: HWC uint8 ``data`` and list ``targets``."""

    classes = ["airplane", "automobile"]

    def __init__(self, root: str, train: bool, download: bool) -> None:
        n = 4 if train else 2
        self.data = np.arange(n * 32 * 32 * 3, dtype=np.int64).reshape(n, 32, 32, 3).astype(np.uint8)
        self.targets = [i % 2 for i in range(n)]


def test_cifar10_converts_hwc_to_chw(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torchvision.datasets

    monkeypatch.setattr(torchvision.datasets, "CIFAR10", FakeCIFAR10)
    s = load_cifar10(tmp_path)
    hwc = FakeCIFAR10("", True, False).data
    assert s.train_images.shape == (4, 3, 32, 32) and s.test_images.shape == (2, 3, 32, 32)
    assert torch.equal(s.train_images, torch.from_numpy(hwc).permute(0, 3, 1, 2))
    assert s.train_labels.tolist() == [0, 1, 0, 1] and s.train_labels.dtype == torch.int64
    assert s.classes == ("airplane", "automobile")


class OfficialOrderCIFAR10(FakeCIFAR10):
    """40 test images whose first pixel is their position in the official order."""

    def __init__(self, root: str, train: bool, download: bool) -> None:
        n = 60 if train else 40
        self.data = np.zeros((n, 32, 32, 3), dtype=np.uint8)
        self.data[:, 0, 0, 0] = np.arange(n)
        self.targets = [i % 2 for i in range(n)]


def test_cifar10_keeps_the_official_test_order_for_the_analysis_and_the_demo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torchvision.datasets
    from omegaconf import OmegaConf

    from vitladder.analysis.checkpoint import test_split
    from vitladder.data.datamodule import ImageDataModule, split_train_val_test

    monkeypatch.setattr(torchvision.datasets, "CIFAR10", OfficialOrderCIFAR10)
    splits = load_cifar10(tmp_path)
    assert splits.official_test_order and splits.origin == "official CIFAR-10 pixels"
    _, _, test = split_train_val_test(splits, val_size=10, split_seed=3, train_subset=None, test_subset=25)
    assert test.images[:, 0, 0, 0].tolist() == list(range(25)), "the first N test images are the published ones"

    # What the analysis reads (the datamodule's test split) and what the demo exports (test_split): both in order.
    data = OmegaConf.create(
        {
            "source": "cifar10",
            "root": str(tmp_path),
            "batch_size": 8,
            "val_size": 10,
            "split_seed": 3,
            "train_subset": None,
            "test_subset": None,
            "random_crop_padding": 0,
            "horizontal_flip": False,
        }
    )
    datamodule = ImageDataModule(data)
    datamodule.setup()
    assert datamodule.test.images[:, 0, 0, 0].tolist() == list(range(40))
    images, _, _ = test_split(OmegaConf.create({"data": data}))
    assert images[0, 0, 0, 0] == 0, "the demo's image 0 is the official first test image"

    # Sources grouped by class keep the seeded shuffle, so the first N are a sample of every class.
    grouped = ImageSplits(
        splits.train_images, splits.train_labels, splits.test_images, splits.test_labels, splits.classes
    )
    _, _, shuffled = split_train_val_test(grouped, val_size=10, split_seed=3, train_subset=None, test_subset=None)
    order = shuffled.images[:, 0, 0, 0].tolist()
    assert sorted(order) == list(range(40)) and order != list(range(40))
