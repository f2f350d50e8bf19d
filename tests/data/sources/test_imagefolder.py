"""data=imagefolder: folders and archives laid out train/<class>/*, test/<class>/*, decoded once into a cache."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vitladder.data import trees
from vitladder.data.sources import CIFAR10_JPEG, OTHER, ImageSplits, imagefolder
from vitladder.data.sources.cifar10 import STATS as CIFAR10_STATS
from vitladder.data.sources.imagefolder import load_image_folder
from vitladder.errors import DataError

CLASSES = ("cat", "dog", "frog")  # written in this order on purpose: folders must come out sorted


def _png(value: int, size: tuple[int, int] = (32, 32)) -> bytes:
    # Each image is one flat colour that encodes its class and index, so labels can be checked.
    buffer = io.BytesIO()
    Image.new("RGB", size, (value, 255 - value, 7)).save(buffer, format="PNG")
    return buffer.getvalue()


def _value(split: str, label: int, index: int) -> int:
    return 100 * (split == "test") + 10 * label + index


def make_tree(root: Path, n_train: int = 3, n_test: int = 2, classes: tuple[str, ...] = CLASSES) -> Path:
    """root/train/<class>/<i>.png and root/test/<class>/<i>.png with known colours."""
    for split, n in (("train", n_train), ("test", n_test)):
        for label, name in enumerate(sorted(classes)):
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                (folder / f"{i:04d}.png").write_bytes(_png(_value(split, label, i)))
    return root


def make_archive(folder: Path, archive: Path, wrapper: str | None = None) -> Path:
    mode = {".xz": "w:xz", ".gz": "w:gz", ".tar": "w"}[archive.suffix]
    with tarfile.open(archive, mode) as tar:
        for child in sorted(folder.iterdir(), reverse=True):  # reversed: loading must not rely on tar order
            tar.add(child, arcname=f"{wrapper}/{child.name}" if wrapper else child.name)
    return archive


def check_tree_splits(s: ImageSplits, n_train: int = 3, n_test: int = 2) -> None:
    assert s.classes == ("cat", "dog", "frog")
    for split, n in (("train", n_train), ("test", n_test)):
        images, labels = getattr(s, f"{split}_images"), getattr(s, f"{split}_labels")
        assert images.shape == (3 * n, 3, 32, 32) and images.dtype == torch.uint8
        assert labels.tolist() == [k for k in range(3) for _ in range(n)]
        expected = [_value(split, k, i) for k in range(3) for i in range(n)]
        assert images[:, 0, 0, 0].tolist() == expected  # red channel: the image really is that class's
        assert images[:, 1, 5, 5].tolist() == [255 - v for v in expected]  # RGB order kept
        assert bool((images[:, 2] == 7).all())


def test_image_folder_from_folder(tmp_path: Path) -> None:
    splits = load_image_folder(make_tree(tmp_path / "imgs"), tmp_path / "cache")
    check_tree_splits(splits)


@pytest.mark.parametrize(
    "name, wrapper", [("d.tar.xz", None), ("d.tar.xz", "cifar"), ("d.tar.gz", "x"), ("d.tar", None)]
)
def test_image_folder_from_archive(tmp_path: Path, name: str, wrapper: str | None) -> None:
    archive = make_archive(make_tree(tmp_path / "imgs"), tmp_path / name, wrapper)
    check_tree_splits(load_image_folder(archive, tmp_path / "cache"))


def test_image_folder_ignores_hidden_files_and_loose_files(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "imgs")
    (root / "README.txt").write_text("not an image")
    (root / "train" / "labels.csv").write_text("loose file in train/")
    (root / "train" / "cat" / "._0000.png").write_bytes(b"macOS resource fork")
    (root / "train" / ".ipynb_checkpoints").mkdir()
    check_tree_splits(load_image_folder(root, tmp_path / "cache"))


def test_jpeg_images_are_decoded(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "imgs")
    buffer = io.BytesIO()
    Image.new("L", (32, 32), 200).save(buffer, format="JPEG")  # greyscale: converted to RGB
    (root / "train" / "cat" / "0009.jpg").write_bytes(buffer.getvalue())
    s = load_image_folder(root, tmp_path / "cache")
    assert s.train_images.shape[0] == 10 and abs(int(s.train_images[3, :, 9, 9].float().mean()) - 200) <= 2


def test_only_cifar10_as_jpeg_files_is_called_its_jpeg_copy(tmp_path: Path) -> None:
    assert load_image_folder(make_tree(tmp_path / "imgs"), tmp_path / "cache").origin == "another source"
    cifar10 = {  # the shapes the JPEG copy has, not its pixels (np.zeros allocates no memory until written)
        "classes": np.asarray(imagefolder.CIFAR10_CLASSES),
        "train_images": np.zeros((50_000, 3, 32, 32), np.uint8),
        "train_labels": np.zeros(50_000),
        "test_labels": np.zeros(10_000),
    }
    assert imagefolder._origin(cifar10, {".jpg"}) == imagefolder._origin(cifar10, {".jpeg", ".jpg"}) == CIFAR10_JPEG
    assert imagefolder._origin(cifar10, {".jpg", ".png"}) == OTHER  # some files lossless: not that copy
    assert imagefolder._origin({**cifar10, "test_labels": np.zeros(9_999)}, {".jpg"}) == OTHER
    assert imagefolder._origin({**cifar10, "classes": np.asarray(["a"] * 10)}, {".jpg"}) == OTHER


def _forbid(monkeypatch: pytest.MonkeyPatch, name: str, why: str) -> None:
    """Makes ``imagefolder.<name>`` fail the test with ``why`` if it is called."""

    def fail(*args: object) -> None:
        raise AssertionError(why)

    monkeypatch.setattr(imagefolder, name, fail)


@pytest.mark.parametrize("kind", ["folder", "archive"])
def test_cache_is_reused_then_invalidated_by_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    root = make_tree(tmp_path / "imgs")
    source = root if kind == "folder" else make_archive(root, tmp_path / "d.tar.xz")
    cache = tmp_path / "cache"
    first = load_image_folder(source, cache)
    assert len(list(cache.glob("*.npz"))) == 1 and not list(cache.glob(".*tmp"))

    with monkeypatch.context() as m:
        _forbid(m, "_decode_image", "decoded again instead of reading the cache")
        second = load_image_folder(source, cache)
        assert second.classes == first.classes
        for name in ("train_images", "train_labels", "test_images", "test_labels"):
            assert torch.equal(getattr(first, name), getattr(second, name))

        # A changed source has another fingerprint, so it must be decoded again.
        (root / "train" / "cat" / "0100.png").write_bytes(_png(1))
        if kind == "archive":
            make_archive(root, source)
        with pytest.raises(AssertionError, match="decoded again"):
            load_image_folder(source, cache)
    assert load_image_folder(source, cache).train_images.shape[0] == 10


def test_corrupted_cache_is_rebuilt(tmp_path: Path) -> None:
    root, cache = make_tree(tmp_path / "imgs"), tmp_path / "cache"
    load_image_folder(root, cache)
    (cache_file,) = cache.glob("*.npz")
    cache_file.write_bytes(cache_file.read_bytes()[:100])  # truncated, e.g. by a full disk
    check_tree_splits(load_image_folder(root, cache))


def test_unwritable_cache_dir_is_a_data_error(tmp_path: Path) -> None:
    (tmp_path / "cache").write_text("a file where the cache folder should be")
    with pytest.raises(DataError, match="cache"):
        load_image_folder(make_tree(tmp_path / "imgs"), tmp_path / "cache")


def _raises_data_error(source: Path, cache: Path, *needles: str) -> str:
    with pytest.raises(DataError) as info:
        load_image_folder(source, cache)
    message = str(info.value)
    assert "\n" not in message
    assert str(source) in message
    for needle in needles:
        assert needle in message, message
    return message


def _nothing_cached(cache: Path) -> None:
    assert not cache.exists() or not any(cache.iterdir())  # no array file, no temporary file either


def test_missing_root_and_unsupported_files(tmp_path: Path) -> None:
    _raises_data_error(tmp_path / "nowhere", tmp_path / "cache", "does not exist")
    (tmp_path / "images.zip").write_bytes(b"PK")
    _raises_data_error(tmp_path / "images.zip", tmp_path / "cache", "neither a folder nor")


@pytest.mark.parametrize("name", ["d.tar.xz", "d.tar.gz", "d.tar"])
def test_truncated_or_garbage_archive(tmp_path: Path, name: str) -> None:
    archive = make_archive(make_tree(tmp_path / "imgs", n_train=30), tmp_path / name)
    data = archive.read_bytes()
    # Cut anywhere, including just before the end of a compressed stream (an interrupted copy).
    cuts = [len(data) // 3, len(data) // 2, 2 * len(data) // 3] + ([len(data) - 10] if name != "d.tar" else [])
    for cut in cuts:
        archive.write_bytes(data[:cut])
        _raises_data_error(archive, tmp_path / "cache", "truncated or corrupted")
    archive.write_bytes(b"\x00\x01 this is not an archive" * 3)
    _raises_data_error(archive, tmp_path / "cache", "truncated or corrupted")


def _no_test(root: Path) -> None:
    for f in sorted((root / "test").rglob("*"), reverse=True):
        f.unlink() if f.is_file() else f.rmdir()
    (root / "test").rmdir()


def _no_train(root: Path) -> None:
    (root / "train").rename(root / "training")


def _no_classes(root: Path) -> None:
    for f in sorted((root / "train").rglob("*"), reverse=True):
        f.unlink() if f.is_file() else f.rmdir()


def _empty_class(root: Path) -> None:
    for f in (root / "test" / "dog").iterdir():
        f.unlink()


def _other_test_classes(root: Path) -> None:
    (root / "test" / "frog").rename(root / "test" / "toad")


def _not_an_image(root: Path) -> None:
    (root / "train" / "dog" / "0001.png").write_bytes(b"this is text, not a PNG")


def _wrong_size(root: Path) -> None:
    (root / "test" / "cat" / "0000.png").write_bytes(_png(3, size=(64, 48)))


def _not_square(root: Path) -> None:
    (root / "train" / "cat" / "0000.png").write_bytes(_png(3, size=(48, 32)))  # the first image: sets the size


def _too_wide(root: Path) -> None:
    # Only the header, which says 1100x20, and the start of the pixel data: decoding it would fail, so the message
    # below shows that the image was refused from its header alone.
    data = _png(3, size=(1100, 20))
    (root / "train" / "dog" / "0001.png").write_bytes(data[: data.index(b"IDAT") + 4])


BROKEN = {
    "no test/": (_no_test, ("test/",)),
    "no train/": (_no_train, ("train/",)),
    "no class folders": (_no_classes, ("train/", "no class folders")),
    "class without images": (_empty_class, ("test/dog", "no images")),
    "test classes differ": (_other_test_classes, ("missing in test: frog", "extra in test: toad")),
    "not an image": (_not_an_image, ("train/dog/0001.png", "not a decodable image")),
    "wrong size": (_wrong_size, ("test/cat/0000.png", "64x48", "32x32")),
    "not square": (_not_square, ("train/cat/0000.png is 48x32: images must be square: crop or resize them",)),
    "over MAX_SIDE": (_too_wide, ("train/dog/0001.png is 1100x20, more than 1024 px a side: resize it or remove it",)),
}


@pytest.mark.parametrize("kind", ["folder", "tar.xz"])
@pytest.mark.parametrize("case", list(BROKEN))
def test_layout_and_image_errors_name_the_culprit(tmp_path: Path, case: str, kind: str) -> None:
    break_it, needles = BROKEN[case]
    root = make_tree(tmp_path / "imgs")
    break_it(root)
    source = root if kind == "folder" else make_archive(root, tmp_path / "d.tar.xz", wrapper="cifar")
    _raises_data_error(source, tmp_path / "cache", *needles)
    _nothing_cached(tmp_path / "cache")  # nothing cached from a broken source


@pytest.mark.parametrize("kind", ["folder", "tar.xz"])
def test_decoded_pixels_over_the_total_bound_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    # Small files can decode to huge arrays: the bound is on the decoded pixels (here 15 images of 32x32x3 bytes,
    # read at call time from trees, so lowering it stands in for gigabytes).
    root = make_tree(tmp_path / "imgs")
    source = root if kind == "folder" else make_archive(root, tmp_path / "d.tar.xz")
    pixels, cache = 15 * 32 * 32 * 3, tmp_path / "cache"
    monkeypatch.setattr(trees, "MAX_TOTAL_BYTES", pixels - 1)
    message = _raises_data_error(source, cache)
    assert message == (
        f"{source} decodes to over {(pixels - 1) / 2**30:g} GiB of pixels: "
        "too big for one data set of small images; use smaller images or split it"
    )
    _nothing_cached(cache)
    monkeypatch.setattr(trees, "MAX_TOTAL_BYTES", pixels)  # exactly at the bound: loaded
    check_tree_splits(load_image_folder(source, cache))


@pytest.mark.parametrize("name", ["d.tar", "d.tar.xz"])
def test_an_archive_over_the_total_bound_is_refused_before_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    archive, cache = make_archive(make_tree(tmp_path / "imgs"), tmp_path / name), tmp_path / "cache"
    limit = archive.stat().st_size - 1  # one byte over: stands in for an archive of many gigabytes
    monkeypatch.setattr(trees, "MAX_TOTAL_BYTES", limit)
    _forbid(monkeypatch, "_fingerprint", "the archive was read (fingerprinted) before its size was checked")
    message = _raises_data_error(archive, cache)
    assert message == f"{archive} is over {limit / 2**30:g} GiB: too big for one data set of small images; split it"
    _nothing_cached(cache)


# ---------------------------------------------------------------------------------------------
# the real archive (decoded once per machine into <repo>/data/cache, then read back fast)


def test_real_cifar10_jpeg_archive(cifar10_jpeg: ImageSplits) -> None:
    s = cifar10_jpeg
    assert s.origin == "the JPEG copy of CIFAR-10" and not s.official_test_order  # and reports say so
    assert s.classes == ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
    assert s.train_images.shape == (50_000, 3, 32, 32) and s.train_images.dtype == torch.uint8
    assert s.test_images.shape == (10_000, 3, 32, 32) and s.test_images.dtype == torch.uint8
    assert s.train_labels.bincount().tolist() == [5000] * 10
    assert s.test_labels.bincount().tolist() == [1000] * 10
    # Channel means match the published CIFAR-10 statistics: decoding and RGB order are right.
    mean = s.train_images[::10].float().mean((0, 2, 3)) / 255
    assert torch.allclose(mean, torch.tensor(CIFAR10_STATS.mean), atol=0.01)
