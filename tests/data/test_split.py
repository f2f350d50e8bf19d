"""The train/validation/test split: disjoint, complete, seeded by data.split_seed alone, and the exact
images the evaluation sees (the datamodule, analyze.py and the demo rebuild the same seeded test split).

Every image here names its own index in its pixels, so a split reveals which source images it took.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from PIL import Image

from vitladder.analysis.checkpoint import test_split as run_test_split  # not collected as a test
from vitladder.config import compose_rung
from vitladder.data import sources
from vitladder.data.datamodule import ImageDataModule, Split, per_device_batch, split_train_val_test
from vitladder.errors import DataError, UserError


def indexed_images(n: int) -> torch.Tensor:
    """(n, 3, 32, 32) uint8 whose pixel (0, 0) holds the image's index: red = i % 256, green = i // 256."""
    images = torch.zeros(n, 3, 32, 32, dtype=torch.uint8)
    index = torch.arange(n)
    images[:, 0, 0, 0] = (index % 256).to(torch.uint8)
    images[:, 1, 0, 0] = (index // 256).to(torch.uint8)
    return images


def indexed_source(n_train: int, n_test: int, classes: int = 10):
    """An ImageSplits whose test files come sorted by class, as an image folder's do."""
    from vitladder.data.sources import ImageSplits

    return ImageSplits(
        indexed_images(n_train),
        torch.arange(n_train) % classes,
        indexed_images(n_test),
        torch.arange(n_test) * classes // n_test,
        tuple(f"c{k}" for k in range(classes)),
    )


def ids(split: Split, source_labels: torch.Tensor) -> list[int]:
    """The source indices a split holds, in order; checks that every label travelled with its image."""
    index = split.images[:, 0, 0, 0].long() + 256 * split.images[:, 1, 0, 0].long()  # (N,)
    assert torch.equal(split.labels, source_labels[index]), "labels were separated from their images"
    return index.tolist()


def split(
    source, val_size: int, split_seed: int = 0, train_subset: int | None = None, test_subset: int | None = None
) -> tuple[list[int], list[int], list[int]]:
    train, val, test = split_train_val_test(
        source, val_size=val_size, split_seed=split_seed, train_subset=train_subset, test_subset=test_subset
    )
    return ids(train, source.train_labels), ids(val, source.train_labels), ids(test, source.test_labels)


def test_train_and_validation_are_disjoint_and_together_the_whole_training_set() -> None:
    source = indexed_source(300, 60)
    train, val, test = split(source, val_size=40)
    assert len(val) == 40 and len(train) == 260
    assert not set(train) & set(val), "validation images also trained on"
    assert sorted(train + val) == list(range(300))  # nothing lost, nothing twice
    assert sorted(test) == list(range(60))  # every test image, once
    assert train != sorted(train) and val != sorted(val) and test != sorted(test)  # shuffled, not file order


def test_subsets_are_prefixes_and_never_reach_into_validation() -> None:
    source = indexed_source(300, 60)
    train, val, test = split(source, val_size=40)
    sub_train, sub_val, sub_test = split(source, val_size=40, train_subset=25, test_subset=10)
    assert sub_val == val  # the validation split does not depend on how much is trained on
    assert sub_train == train[:25] and sub_test == test[:10]  # "the first N test images" of one fixed order


def test_the_split_depends_on_the_split_seed_and_on_nothing_else() -> None:
    source = indexed_source(300, 60)
    torch.manual_seed(1)
    reference = split(source, val_size=40, split_seed=0)
    # Whatever ran before: another global seed and draws from every global RNG, another split.
    torch.manual_seed(2)
    torch.rand(7)
    random.random()
    np.random.rand(3)
    split(indexed_source(50, 20), val_size=5, split_seed=3)
    assert split(source, val_size=40, split_seed=0) == reference
    other_train, other_val, other_test = split(source, val_size=40, split_seed=1)
    assert other_val != reference[1] and other_test != reference[2]  # the seed really drives both orders


def test_the_first_test_images_are_a_sample_of_every_class() -> None:
    source = indexed_source(100, 200)  # test files sorted by class: 20 of each
    _, _, test = split_train_val_test(source, val_size=10, split_seed=0, train_subset=None, test_subset=None)
    assert len(set(test.labels[:40].tolist())) >= 8  # file order would give 2 classes


def test_the_seeded_order_is_the_one_finished_runs_were_evaluated_on() -> None:
    # A contract with runs already on disk: analyze.py and the demo rebuild a run's test split from its
    # config.yaml, so a change of this order would silently analyse old runs on other images.
    train, val, test = split(indexed_source(12, 10), val_size=3, split_seed=0)
    assert val == [8, 0, 5]
    assert train == [9, 7, 4, 2, 10, 3, 1, 11, 6]
    assert test == [6, 7, 9, 5, 0, 4, 3, 2, 1, 8]


@pytest.mark.parametrize(("official", "order"), [(True, "official"), (False, "seeded")])
def test_the_data_facts_say_whether_the_test_images_keep_the_sources_order(official, order, monkeypatch) -> None:
    source = replace(indexed_source(20, 10), official_test_order=official, origin="indexed images")
    monkeypatch.setattr(sources, "load", lambda data_cfg: source)
    cfg = {"val_size": 4, "split_seed": 0, "train_subset": None, "test_subset": None, "batch_size": 4}
    datamodule = ImageDataModule(OmegaConf.create(cfg))
    datamodule.setup()
    facts = {"data": "indexed images", "train_images": 16, "val_images": 4, "test_images": 10, "test_order": order}
    assert datamodule.facts() == facts
    assert (ids(datamodule.test, source.test_labels) == list(range(10))) == official


def test_val_size_0_trains_on_every_training_image() -> None:
    source = indexed_source(300, 60)
    train, val, _ = split(source, val_size=0)
    assert val == [] and sorted(train) == list(range(300)) and train != sorted(train)  # all, in a seeded order
    assert split(source, val_size=0, train_subset=25)[0] == train[:25]


def test_a_validation_set_as_large_as_the_training_set_is_refused() -> None:
    with pytest.raises(DataError, match="val_size=12 leaves no training images"):
        split(indexed_source(12, 10), val_size=12)


# --- the exact images the evaluation sees ------------------------------------------------------


def write_image_folder(root: Path, per_class: int = 6, classes: int = 3) -> Path:
    """root/{train,test}/<class>/<i>.png, each a flat colour naming (split, class, index)."""
    for split_name, offset in (("train", 0), ("test", 128)):
        for label in range(classes):
            folder = root / split_name / f"class{label}"
            folder.mkdir(parents=True)
            for i in range(per_class):
                Image.new("RGB", (32, 32), (offset + label * per_class + i, 0, 0)).save(folder / f"{i}.png")
    return root


def source_index(images: torch.Tensor, source_images: torch.Tensor) -> list[int]:
    """Where each image sits in the source (images are unique there)."""
    flat, pool = images.flatten(1), source_images.flatten(1)  # (n, D), (N, D)
    matches = (flat[:, None, :] == pool[None, :, :]).all(-1)  # (n, N)
    assert bool((matches.sum(1) == 1).all()), "an image matches no source image, or several"
    return matches.int().argmax(1).tolist()


# The training seed and the split seed differ, so a split drawn from the training seed shows.
OTHER_SEEDS = ["seed=1", "data.split_seed=2"]


@pytest.fixture
def imagefolder_cfg(tmp_path: Path):
    root = write_image_folder(tmp_path / "images")
    return compose_rung(
        "patch4",
        [
            "profile=smoke",
            "data=imagefolder",
            f"data.root={root}",
            f"data.cache_dir={tmp_path / 'cache'}",
            "data.val_size=4",
            "data.batch_size=8",
            "data.train_subset=null",
            "data.test_subset=10",
            f"output_root={tmp_path}",
            *OTHER_SEEDS,
        ],
    )


@pytest.fixture
def synthetic_cfg(tmp_path: Path):
    return compose_rung(
        "patch4",
        [
            "profile=smoke",
            "data=synthetic",
            "data.num_train=40",
            "data.num_test=30",
            "data.val_size=8",
            "data.batch_size=8",
            "data.train_subset=20",
            "data.test_subset=12",
            f"output_root={tmp_path}",
            *OTHER_SEEDS,
        ],
    )


@pytest.mark.parametrize("cfg_name", ["synthetic_cfg", "imagefolder_cfg"])
def test_training_and_re_analysis_see_the_same_seeded_test_images(cfg_name: str, request) -> None:
    """The datamodule (training, the analysis callback) and test_split (analyze.py, the demo) hold the
    same test images in the same order: the first data.test_subset of the split_seed's permutation."""
    cfg = request.getfixturevalue(cfg_name)
    source = sources.load(cfg.data)
    datamodule = ImageDataModule(cfg.data, seed=int(cfg.seed))
    datamodule.setup()
    images, labels, classes = run_test_split(cfg)
    assert torch.equal(images, datamodule.test.images) and torch.equal(labels, datamodule.test.labels)
    assert classes == datamodule.classes == source.classes

    # The permutation an indexed source of the same sizes reveals, under the run's split_seed.
    _, _, expected = split(
        indexed_source(len(source.train_labels), len(source.test_labels)),
        val_size=int(cfg.data.val_size),
        split_seed=int(cfg.data.split_seed),
        test_subset=int(cfg.data.test_subset),
    )
    assert source_index(datamodule.test.images, source.test_images) == expected
    assert torch.equal(datamodule.test.labels, source.test_labels[expected])
    assert len(datamodule.train.labels) == (cfg.data.train_subset or len(source.train_labels) - cfg.data.val_size)
    # the validation images are out of the training images, by content as well as by index
    val = set(source_index(datamodule.val.images, source.train_images))
    assert not val & set(source_index(datamodule.train.images, source.train_images))


def test_the_global_batch_is_shared_evenly_by_the_devices() -> None:
    assert [per_device_batch(512, 1), per_device_batch(512, 2), per_device_batch(1, 1)] == [512, 256, 1]
    with pytest.raises(UserError) as error:
        per_device_batch(6, 4)
    assert str(error.value) == (
        "data.batch_size=6 is the global batch and must split evenly over 4 devices: "
        "choose a multiple of 4, e.g. data.batch_size=4"
    )
    with pytest.raises(UserError, match="e.g. data.batch_size=3"):
        per_device_batch(0, 3)


def test_under_mixup_cutmix_each_device_gets_an_even_batch_or_a_batch_that_does_is_suggested() -> None:
    # timm's Mixup pairs every image with another of its batch and asserts an even batch.
    assert per_device_batch(512, 4, even=True) == 128 and per_device_batch(510, 6) == 85
    with pytest.raises(UserError) as odd:
        per_device_batch(510, 6, even=True)
    assert str(odd.value) == (
        "data.batch_size=510 gives 85 images per device on 6 devices, and MixUp/CutMix needs an even batch: "
        "choose a multiple of 12, e.g. data.batch_size=504"
    )
    with pytest.raises(UserError) as odd:
        per_device_batch(512, 6, even=True)  # 510, the suggestion without mixing, would be odd per device
    assert str(odd.value) == (
        "data.batch_size=512 is the global batch and must split evenly over 6 devices into even batches "
        "(MixUp/CutMix): choose a multiple of 12, e.g. data.batch_size=504"
    )
    for batch in (63, 1):  # one device: the batch itself must be even
        with pytest.raises(UserError, match=rf"^data.batch_size={batch} gives {batch} images per device, and MixUp"):
            per_device_batch(batch, 1, even=True)
