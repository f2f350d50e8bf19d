"""`data=<source>` loads the images the config names: the synthetic set of its sizes and seed, CIFAR-10
downloaded where missing, an image folder decoded into its cache; anything else is one clear error."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

import vitladder.data.datamodule as datamodule_module
from vitladder.data.datamodule import load_source
from vitladder.data.sources import make_synthetic
from vitladder.errors import DataError


def same_splits(a, b) -> bool:
    return (
        all(
            torch.equal(getattr(a, f), getattr(b, f))
            for f in ("train_images", "train_labels", "test_images", "test_labels")
        )
        and a.classes == b.classes
    )


def test_synthetic_data_is_the_set_of_its_sizes_and_seed() -> None:
    cfg = OmegaConf.create({"source": "synthetic", "num_train": 30, "num_test": 20})
    loaded = load_source(cfg)
    assert same_splits(loaded, make_synthetic(30, 20, seed=0))  # no data.seed: seed 0
    cfg.seed = 3
    reseeded = load_source(cfg)
    assert same_splits(reseeded, make_synthetic(30, 20, seed=3)) and not same_splits(reseeded, loaded)


def test_cifar10_and_image_folders_are_read_from_the_configured_paths(monkeypatch, tmp_path) -> None:
    calls = []
    monkeypatch.setattr(datamodule_module, "load_cifar10", lambda *a, **k: calls.append(("cifar10", a, k)))
    monkeypatch.setattr(datamodule_module, "load_image_folder", lambda *a, **k: calls.append(("folder", a, k)))
    load_source(OmegaConf.create({"source": "cifar10", "root": str(tmp_path / "data")}))
    load_source(
        OmegaConf.create(
            {
                "source": "imagefolder",
                "root": str(tmp_path / "imgs"),
                "cache_dir": str(tmp_path / "cache"),
                "max_file_mib": 7,
            }
        )
    )
    assert calls == [
        ("cifar10", (tmp_path / "data",), {"download": True}),  # fetched when missing
        ("folder", (tmp_path / "imgs",), {"cache_dir": tmp_path / "cache", "max_file_mib": 7}),
    ]


def test_an_unknown_source_is_one_clear_error() -> None:
    with pytest.raises(
        DataError, match="^unknown data source 'mnist': use data=cifar10, data=imagefolder or data=synthetic$"
    ):
        load_source(OmegaConf.create({"source": "mnist"}))
