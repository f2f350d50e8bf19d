"""Where the pixels come from: a source is a module of this package, found by its name in ``data=<source>``, that
defines ``load(data_cfg) -> ImageSplits`` and, for keys of its own, a ``Config(DataConfig)``; a module whose name
starts with ``_`` is no source. Nothing after the load cares which source ran."""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import pkgutil
from dataclasses import dataclass, fields
from types import ModuleType
from typing import TYPE_CHECKING

from omegaconf import DictConfig, OmegaConf

from vitladder.config_schema import DataConfig
from vitladder.errors import DataError

if TYPE_CHECKING:
    import torch

    from vitladder.data.stats import ChannelStats

# What the pixels are (ImageSplits.origin), said beside every result (done.json, report.md, ladder.csv, the GPU
# check): the article's figures come from the official pixels, and a lossy copy trains a little worse.
OFFICIAL_CIFAR10 = "official CIFAR-10 pixels"
CIFAR10_JPEG = "the JPEG copy of CIFAR-10"
SYNTHETIC = "synthetic images"
OTHER = "another source"


@dataclass(frozen=True)
class ImageSplits:
    train_images: torch.Tensor  # (N, 3, S, S) uint8
    train_labels: torch.Tensor  # (N,) int64
    test_images: torch.Tensor  # (M, 3, S, S) uint8
    test_labels: torch.Tensor  # (M,) int64
    classes: tuple[str, ...]
    # True when the test images come in the dataset's official order (torchvision's CIFAR-10), so "the first N test
    # images" are the published ones; False for files grouped by class.
    official_test_order: bool = False
    stats: ChannelStats | None = None  # the statistics the source publishes (CIFAR-10's); None: the training split's
    origin: str = OTHER  # what the pixels are: OFFICIAL_CIFAR10, CIFAR10_JPEG, SYNTHETIC or OTHER

    @property
    def image_size(self) -> int:
        return int(self.train_images.shape[-1])  # S, the same in both splits

    @functools.cached_property
    def digest(self) -> str:
        """sha256 of the arrays and the class names: which images these are, whatever their source or path."""
        digest = hashlib.sha256(json.dumps(self.classes).encode())
        for array in (self.train_images, self.train_labels, self.test_images, self.test_labels):
            digest.update(json.dumps([str(array.dtype), list(array.shape)]).encode())
            digest.update(array.contiguous().numpy().data)
        return digest.hexdigest()


def source_names() -> list[str]:
    return sorted(info.name for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_"))


def source_named(name: str) -> ModuleType:
    """The module of ``data=<name>``; an unknown name is one line listing the known ones."""
    if name not in (names := source_names()):
        options = [f"data={n}" for n in names]
        raise DataError(f"unknown data source '{name}': use {', '.join(options[:-1])} or {options[-1]}")
    return importlib.import_module(f"{__name__}.{name}")


# The loaded data set, kept for the process: a ladder's estimate and each of its rungs (and a run's set-up
# before and inside Lightning) share one load. One entry at most, so memory holds one data set.
_loaded: dict[str, ImageSplits] = {}
_SPLIT_KEYS = {f.name for f in fields(DataConfig)} - {"source"}  # how the images are used, not which images


def _source_values(data_cfg: DictConfig) -> dict:  # the keys that choose the images, not how they are used
    return {k: v for k, v in OmegaConf.to_container(data_cfg, resolve=True).items() if k not in _SPLIT_KEYS}


def load(data_cfg: DictConfig) -> ImageSplits:
    """The images of ``data=<source>``, loaded once per process (the same object for the same source keys)."""
    if (key := json.dumps(_source_values(data_cfg), sort_keys=True, default=str)) not in _loaded:
        _loaded.clear()  # first: the old data set is let go before the new one loads
        _loaded[key] = source_named(data_cfg.source).load(data_cfg)
    return _loaded[key]


def describe(data_cfg: DictConfig) -> dict:
    """What the run's data set is, in the same terms for every source (this process's load, not a new one)."""
    splits, values = load(data_cfg), _source_values(data_cfg)
    return {
        "source": values.pop("source"),
        "config": values,
        "sha256": splits.digest,
        "train_images": len(splits.train_labels),
        "test_images": len(splits.test_labels),
        "image_size": splits.image_size,
        "classes": list(splits.classes),
    }
