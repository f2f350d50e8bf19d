"""`data=<source>` finds the module data/sources/<source>.py: the three shipped, a new one dropped in as one
file, and anything else as one clear error; a process loads the same data once."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from extensions import add_stripes_source
from omegaconf import OmegaConf

from vitladder.config import compose_rung
from vitladder.data import sources
from vitladder.data.datamodule import ImageDataModule
from vitladder.data.sources.synthetic import make_synthetic
from vitladder.errors import DataError, UserError
from vitladder.training.recipe import in_recipe


@pytest.fixture(autouse=True)
def nothing_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "_loaded", {})  # each test starts in a fresh process, as far as loads go


def same_splits(a, b) -> bool:
    return (
        all(
            torch.equal(getattr(a, f), getattr(b, f))
            for f in ("train_images", "train_labels", "test_images", "test_labels")
        )
        and a.classes == b.classes
    )


def test_the_shipped_sources_are_the_modules_of_the_package() -> None:
    assert sources.source_names() == ["cifar10", "imagefolder", "synthetic"]
    for name in sources.source_names():
        assert callable(sources.source_named(name).load)


def test_synthetic_data_is_the_set_of_its_sizes_and_seed() -> None:
    cfg = OmegaConf.create({"source": "synthetic", "num_train": 30, "num_test": 20})
    loaded = sources.load(cfg)
    assert same_splits(loaded, make_synthetic(30, 20, seed=0))  # no data.seed: seed 0
    cfg.seed = 3
    reseeded = sources.load(cfg)
    assert same_splits(reseeded, make_synthetic(30, 20, seed=3)) and not same_splits(reseeded, loaded)


def test_cifar10_and_image_folders_are_read_from_the_configured_paths(monkeypatch, tmp_path) -> None:
    from vitladder.data.sources import cifar10, imagefolder

    calls = []
    monkeypatch.setattr(cifar10, "load_cifar10", lambda *a, **k: calls.append(("cifar10", a, k)))
    monkeypatch.setattr(imagefolder, "load_image_folder", lambda *a, **k: calls.append(("folder", a, k)))
    sources.load(OmegaConf.create({"source": "cifar10", "root": str(tmp_path / "data")}))
    folder = {
        "source": "imagefolder",
        "root": str(tmp_path / "imgs"),
        "cache_dir": str(tmp_path / "c"),
        "max_file_mib": 7,
    }
    sources.load(OmegaConf.create(folder))
    assert calls == [
        ("cifar10", (tmp_path / "data",), {}),
        ("folder", (str(tmp_path / "imgs"), str(tmp_path / "c"), 7), {}),
    ]


def test_an_unknown_source_is_one_clear_error() -> None:
    with pytest.raises(
        DataError, match="^unknown data source 'mnist': use data=cifar10, data=imagefolder or data=synthetic$"
    ):
        sources.load(OmegaConf.create({"source": "mnist"}))


def test_the_same_images_are_loaded_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from vitladder.data.sources import synthetic

    calls = []  # per load: how many data sets the cache held while it ran
    real = synthetic.load
    monkeypatch.setattr(synthetic, "load", lambda cfg: calls.append(len(sources._loaded)) or real(cfg))
    cfg = OmegaConf.create({"source": "synthetic", "num_train": 30, "num_test": 20, "batch_size": 8, "val_size": 5})
    first = sources.load(cfg)
    # Another batch size or split is the same images: not loaded again.
    assert sources.load(OmegaConf.merge(cfg, {"batch_size": 4, "val_size": 9})) is first and len(calls) == 1
    newer = sources.load(OmegaConf.merge(cfg, {"num_train": 40}))  # other images: loaded, and the old ones let go
    assert [id(splits) for splits in sources._loaded.values()] == [id(newer)]
    assert calls == [0, 0], "the old images are let go before the new ones load: never two data sets in memory"


@pytest.fixture
def stripes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """conf/ untouched, no Python edited: only data/sources/stripes.py added."""
    add_stripes_source(tmp_path, monkeypatch)


def test_a_new_source_is_one_module_found_by_its_name(stripes) -> None:
    assert "stripes" in sources.source_names()
    cfg = compose_rung("patch8", ["data=stripes", "data.num_images=50", "data.batch_size=5", "data.val_size=10"])
    assert (cfg.data.source, cfg.data.num_images) == ("stripes", 50)
    datamodule = ImageDataModule(cfg.data)
    datamodule.prepare_data()
    datamodule.setup()
    assert (datamodule.classes, datamodule.num_classes, datamodule.image_size) == (("even", "odd"), 2, 16)
    assert datamodule.steps_per_epoch == (40 - 10) // 5
    images, labels = next(iter(datamodule.train_dataloader()))
    assert images.shape == (5, 3, 16, 16) and set(labels.tolist()) <= {0, 1}


def test_a_new_sources_keys_are_typed_by_its_config(stripes) -> None:
    with pytest.raises(UserError, match="data.num_images"):
        compose_rung("patch8", ["data=stripes", "data.num_images=many"])
    with pytest.raises(UserError, match="data.root: no such key with data=stripes"):
        compose_rung("patch8", ["data=stripes", "data.root=x"])


def test_a_new_sources_ranges_and_recipe_keys_live_in_its_config(stripes) -> None:
    with pytest.raises(UserError) as error:
        compose_rung("patch8", ["data=stripes", "data.num_images=3"])
    assert str(error.value) == (
        "data.num_images=3 is not valid: data.num_images must be at least 20, e.g. data.num_images=40"
    )
    assert compose_rung("patch8", ["data=stripes", "data.num_images=20"]).data.num_images == 20
    assert in_recipe("data.num_images") and not in_recipe("data.scratch_dir")
    # the shipped sources' own keys, likewise
    assert not in_recipe("data.cache_dir") and not in_recipe("data.max_file_mib") and in_recipe("data.num_train")
    with pytest.raises(UserError, match=r"^data.num_test=0 is not valid: data.num_test must be at least 1"):
        compose_rung("patch8", ["data=synthetic", "data.num_test=0"])
