"""``data=cifar10``: torchvision's CIFAR-10 (checksums verified), downloaded into ``data.root`` when missing."""

from __future__ import annotations

import contextlib
import socket
from dataclasses import dataclass
from pathlib import Path

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
    return load_cifar10(Path(data_cfg.root))


def load_cifar10(root: str | Path) -> ImageSplits:
    """CIFAR-10 from ``root/cifar-10-batches-py`` (or that folder itself), downloaded there when missing."""
    from torchvision.datasets import CIFAR10  # imported here: only this source needs it

    root = Path(root).expanduser()
    root = root.parent if root.name == "cifar-10-batches-py" else root
    made = [folder for folder in (root, *root.parents) if not folder.exists()]  # what a download would create
    previous_timeout = socket.getdefaulttimeout()
    # torchvision's urlopen has no timeout: on a network that drops packets silently it would hang for minutes.
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)
    try:
        train, test = (CIFAR10(str(root), train=is_train, download=True) for is_train in (True, False))
    except (OSError, RuntimeError) as error:  # URLError and socket.timeout are OSErrors
        for folder in made:  # deepest first; one holding a partial download stays
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise DataError(
            f"could not download CIFAR-10 into {root} (no network?): run again with a network; or, for a JPEG copy "
            "laid out as train/<class>/ and test/<class>/, make ladder DATA=PATH/cifar10-jpeg.tar.xz; or use a local "
            "copy with data.root=PATH (the folder holding cifar-10-batches-py) or data=imagefolder "
            "data.root=PATH/cifar10-jpeg.tar.xz"
        ) from error
    finally:
        socket.setdefaulttimeout(previous_timeout)
    tensors = []
    for ds in (train, test):  # HWC uint8 images -> (N, 3, 32, 32), and (N,) int64 labels
        tensors += [torch.from_numpy(ds.data).permute(0, 3, 1, 2).contiguous(), torch.tensor(ds.targets)]
    return ImageSplits(*tensors, tuple(train.classes), official_test_order=True, stats=STATS, origin=OFFICIAL_CIFAR10)
