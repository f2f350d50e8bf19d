"""``data=cifar10``: torchvision's CIFAR-10 (checksums verified), downloaded into ``data.root`` when missing."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from omegaconf import MISSING, DictConfig

from vitladder.config_schema import DataConfig
from vitladder.data.sources import OFFICIAL_CIFAR10, ImageSplits
from vitladder.data.stats import ChannelStats
from vitladder.errors import DataError

# The published per-channel statistics of CIFAR-10's training images. Every model written before the
# statistics travelled with it was normalised with these, whatever its source.
STATS = ChannelStats(mean=(0.4914, 0.4822, 0.4465), std=(0.2470, 0.2435, 0.2616))
DOWNLOAD_TIMEOUT_S = 30.0


@dataclass
class Config(DataConfig):
    """data=cifar10's keys (values: conf/data/cifar10.yaml)."""

    root: str = MISSING


def load(data_cfg: DictConfig) -> ImageSplits:
    return load_cifar10(Path(data_cfg.root), download=True)


@contextlib.contextmanager
def _socket_timeout(seconds: float) -> Iterator[None]:
    # torchvision's urlopen has no timeout: on a network that drops packets silently it would hang
    # for minutes. A default socket timeout turns that into an error we can explain.
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(previous)


def _datasets(root: Path, download: bool) -> tuple:
    """torchvision's (train, test) CIFAR10 datasets under ``root``, downloaded there if asked and needed."""
    from torchvision import datasets  # imported here: only this source needs it

    root = root.expanduser()
    if root.name == "cifar-10-batches-py":  # accept the batches folder itself as well as its parent
        root = root.parent
    local_copy = (
        "use a local copy with data.root=PATH (the folder holding cifar-10-batches-py) "
        "or data=imagefolder data.root=PATH/cifar10-jpeg.tar.xz"
    )
    made = [folder for folder in (root, *root.parents) if not folder.exists()]  # what the download would create
    try:
        with _socket_timeout(DOWNLOAD_TIMEOUT_S):
            return (
                datasets.CIFAR10(str(root), train=True, download=download),
                datasets.CIFAR10(str(root), train=False, download=download),
            )
    except (OSError, RuntimeError) as error:  # URLError and socket.timeout are OSErrors
        if download:
            for folder in made:  # deepest first; one holding a partial download stays
                with contextlib.suppress(OSError):
                    folder.rmdir()
            raise DataError(
                f"could not download CIFAR-10 into {root} (no network?): run again with a network; or, for a JPEG "
                "copy laid out as train/<class>/ and test/<class>/, make ladder DATA=PATH/cifar10-jpeg.tar.xz; "
                f"or {local_copy}"
            ) from error
        raise DataError(
            f"CIFAR-10 not found or corrupted in {root} (no valid cifar-10-batches-py): {local_copy}"
        ) from error


def load_cifar10(root: str | Path, download: bool = True) -> ImageSplits:
    """CIFAR-10 from ``root/cifar-10-batches-py`` (checksums verified), downloaded there if needed."""
    train, test = _datasets(Path(root), download)

    def to_tensors(ds) -> tuple[torch.Tensor, torch.Tensor]:
        images = torch.from_numpy(np.ascontiguousarray(ds.data.transpose(0, 3, 1, 2)))  # (N, 3, 32, 32)
        return images, torch.tensor(ds.targets, dtype=torch.int64)

    train_images, train_labels = to_tensors(train)
    test_images, test_labels = to_tensors(test)
    return ImageSplits(
        train_images,
        train_labels,
        test_images,
        test_labels,
        tuple(train.classes),
        official_test_order=True,
        stats=STATS,
        origin=OFFICIAL_CIFAR10,
    )
