"""Hostile image folders and archives: bounded reads, only regular files, links followed or refused
with a count, 16-bit and other pixel modes converted correctly."""

from __future__ import annotations

import builtins
import io
import lzma
import os
import re
import signal
import tarfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vitladder.data import trees
from vitladder.data.sources import ImageSplits
from vitladder.data.sources import imagefolder as sources
from vitladder.data.sources.imagefolder import load_image_folder
from vitladder.data.trees import ArchiveTree, FolderTree, walk
from vitladder.errors import DataError

MIB = 1 << 20


def png(value: int, mode: str = "RGB") -> bytes:
    buffer = io.BytesIO()
    Image.new(mode, (32, 32), (value, 255 - value, 7) if mode == "RGB" else value).save(buffer, format="PNG")
    return buffer.getvalue()


def make_tree(root: Path, classes: tuple[str, ...] = ("cat", "dog"), n_train: int = 3, n_test: int = 2) -> Path:
    """root/{train,test}/<class>/<i>.png, each a flat colour that encodes split, class and index."""
    for split, n in (("train", n_train), ("test", n_test)):
        for label, name in enumerate(classes):
            (root / split / name).mkdir(parents=True, exist_ok=True)
            for i in range(n):
                (root / split / name / f"{i:04d}.png").write_bytes(png(100 * (split == "test") + 10 * label + i))
    return root


def tar_of(folder: Path, archive: Path) -> Path:
    """The folder as tar(1) would pack it: symlinks stay symlinks, a second hard link becomes a link member."""
    mode = {".xz": "w:xz", ".tar": "w"}[archive.suffix]
    with tarfile.open(archive, mode) as tar:
        tar.add(folder, arcname=folder.name)
    return archive


def raw_tar(archive: Path, *members: tuple[tarfile.TarInfo, bytes]) -> Path:
    """An archive written member by member (headers that tar(1) would never write, too)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    data = buffer.getvalue()
    archive.write_bytes(lzma.compress(data) if archive.name.endswith(".xz") else data)
    return archive


def member(name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, target: str = "") -> tuple:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname = kind, len(data) if kind == tarfile.REGTYPE else 0, target
    return info, data


def one_line_error(source: Path, cache: Path, *needles: str, **kwargs: object) -> str:
    with pytest.raises(DataError) as info:
        load_image_folder(source, cache, **kwargs)
    message = str(info.value)
    assert "\n" not in message and str(source) in message
    for needle in needles:
        assert needle in message, message
    assert not list(cache.glob("*.npz"))  # nothing cached from a refused source
    return message


@pytest.fixture
def decompressed_bytes(monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """How many decompressed bytes the archive reader took in all: a bound on its work that no busy machine
    can blur, as a clock would."""
    taken = [0]
    read = trees.Budget.read  # the project's own reader of the decompressed stream

    def counted(self: trees.Budget, size: int = -1) -> bytes:
        data = read(self, size)
        taken[0] += len(data)
        return data

    monkeypatch.setattr(trees.Budget, "read", counted)
    return lambda: taken[0]


def assert_same_splits(a: ImageSplits, b: ImageSplits) -> None:
    assert a.classes == b.classes
    for name in ("train_images", "train_labels", "test_images", "test_labels"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name


def forbid_opening(monkeypatch: pytest.MonkeyPatch, *paths: Path) -> None:
    """Fails the test at once if any of ``paths`` (or what it links to) is opened: reading /dev/zero or a
    2 GiB file in a regression would otherwise take the machine's memory with it."""
    forbidden = {os.path.realpath(p) for p in paths}

    def guard(opener):
        def guarded(file, *args, **kwargs):
            if isinstance(file, (str, bytes, os.PathLike)) and os.path.realpath(file) in forbidden:
                raise AssertionError(f"opened {file}")
            return opener(file, *args, **kwargs)

        return guarded

    for module, name in ((builtins, "open"), (io, "open"), (os, "open")):
        monkeypatch.setattr(module, name, guard(getattr(module, name)))


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """A hang (e.g. reading a FIFO) fails the test instead of stalling the suite."""

    def expire(*_: object) -> None:
        raise AssertionError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# ---------------------------------------------------------------------------------------------
# size caps, checked before reading


@pytest.mark.parametrize("name", ["root/train/cat/big.png", "root/README.bin"])
def test_a_2gib_member_of_a_tiny_xz_is_refused_at_its_header(
    tmp_path: Path, name: str, decompressed_bytes: Callable[[], int]
) -> None:
    # Every member counts, not only images: reading past one costs as much as reading it.
    info = tarfile.TarInfo(name)
    info.size = 2 << 30
    header = info.tobuf(format=tarfile.GNU_FORMAT)
    archive = tmp_path / "d.tar.xz"
    archive.write_bytes(lzma.compress(header + bytes(MIB)))  # the data is cut short: a reader would notice
    assert archive.stat().st_size < 4096
    message = one_line_error(
        archive,
        tmp_path / "cache",
        f"member {name}",
        "2048.0 MiB",
        "over the 4 MiB limit",
        "refused unread",
        "data.max_file_mib",
    )
    assert decompressed_bytes() < 64 * 1024, message  # the header's record, not its megabyte of data


def test_the_cap_is_data_max_file_mib(tmp_path: Path) -> None:
    # A real xz of zeros just over a 0.25 MiB cap: refused; under a 1 MiB cap it is read (and is no image).
    archive = raw_tar(tmp_path / "d.tar.xz", member("train/cat/0000.png", bytes(MIB // 4 + 1)))
    one_line_error(archive, tmp_path / "cache", "train/cat/0000.png", "over the 0.25 MiB limit", max_file_mib=0.25)
    one_line_error(archive, tmp_path / "cache", "train/cat/0000.png", "not a decodable image", max_file_mib=1)


@pytest.mark.parametrize("value", [0, -1, float("inf"), "abc", True, None])
def test_a_bad_cap_is_one_line(tmp_path: Path, value: object) -> None:
    with pytest.raises(DataError, match=r"data.max_file_mib=.* is not valid: it takes a positive number"):
        load_image_folder(make_tree(tmp_path / "imgs"), tmp_path / "cache", max_file_mib=value)


def test_a_huge_file_in_a_folder_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_tree(tmp_path / "imgs")
    big = root / "train" / "cat" / "0009.png"
    with open(big, "wb") as f:
        f.truncate(2 << 30)  # sparse: 2 GiB that cost nothing to make
    forbid_opening(monkeypatch, big)
    one_line_error(root, tmp_path / "cache", "train/cat/0009.png", "2048.0 MiB", "refused unread")


def test_a_huge_pax_header_is_refused_after_a_bounded_read(
    tmp_path: Path, decompressed_bytes: Callable[[], int]
) -> None:
    info = tarfile.TarInfo("././@PaxHeader")
    info.type, info.size = tarfile.XHDTYPE, 2 << 30
    archive = tmp_path / "d.tar.xz"
    archive.write_bytes(lzma.compress(info.tobuf(format=tarfile.USTAR_FORMAT) + bytes(64 * MIB)))
    one_line_error(archive, tmp_path / "cache", "truncated or corrupted", "over 1 MiB of headers before")
    assert decompressed_bytes() <= trees.MAX_HEADER_BYTES + 2 * tarfile.RECORDSIZE  # not the 64 MiB behind it


@pytest.mark.parametrize(
    "map_headers",
    [{}, {"GNU.sparse.major": "0", "GNU.sparse.minor": "1", "GNU.sparse.map": "0,1", "GNU.sparse.size": "1"}],
)
def test_a_sparse_member_is_refused(tmp_path: Path, map_headers: dict) -> None:
    # GNU's old format (a type of its own) and pax 0.1 (the map in a pax record).
    info = tarfile.TarInfo("train/cat/0.png")
    info.type, info.pax_headers = tarfile.REGTYPE if map_headers else tarfile.GNUTYPE_SPARSE, map_headers
    archive = tmp_path / "d.tar"
    archive.write_bytes(info.tobuf(format=tarfile.PAX_FORMAT if map_headers else tarfile.GNU_FORMAT) + bytes(10 * 512))
    one_line_error(archive, tmp_path / "cache", "truncated or corrupted", "is a sparse file")


@pytest.mark.parametrize("lines", [4 * MIB, 2], ids=["long", "cut short"])
def test_a_pax_sparse_map_is_bounded_and_one_line(
    tmp_path: Path, lines: int, decompressed_bytes: Callable[[], int]
) -> None:
    # GNU's pax 1.0 sparse member keeps its map (a count, then an offset or size per line) before its data,
    # where tarfile reads it whole: here a count of a billion and 8 MiB of lines, which xz makes 2 kB; or two.
    info = tarfile.TarInfo("train/cat/0.png")
    info.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.realsize": "1"}
    archive = tmp_path / "d.tar.xz"
    archive.write_bytes(lzma.compress(info.tobuf(format=tarfile.PAX_FORMAT) + b"1000000000\n" + b"0\n" * lines))
    one_line_error(archive, tmp_path / "cache", "truncated or corrupted")
    assert decompressed_bytes() <= trees.MAX_HEADER_BYTES + 2 * tarfile.RECORDSIZE  # not the 8 MiB of the map


def test_a_malformed_sparse_map_is_one_line(tmp_path: Path) -> None:
    info = tarfile.TarInfo("train/cat/0.png")
    info.pax_headers = {"GNU.sparse.major": "0", "GNU.sparse.minor": "1", "GNU.sparse.map": "x,y"}
    archive = tmp_path / "d.tar"
    archive.write_bytes(info.tobuf(format=tarfile.PAX_FORMAT) + bytes(10 * 512))
    one_line_error(archive, tmp_path / "cache", "truncated or corrupted", "ValueError")


def read_members(archive: Path) -> dict:
    """{path: its bytes} of the archive's wanted members, every path wanted."""
    tree = ArchiveTree(archive, MIB)
    return walk(tree, lambda parts: True)[1]


def test_headers_count_towards_the_decompressed_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # One tiny member behind a 100 kB pax record: under every per-member bound, over the stream's.
    info = tarfile.TarInfo("train/cat/0.png")
    info.pax_headers = {"comment": "x" * 100_000}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(info, io.BytesIO())
    archive = tmp_path / "d.tar"
    archive.write_bytes(buffer.getvalue())
    monkeypatch.setattr(trees, "MAX_TOTAL_BYTES", 1000)
    monkeypatch.setattr(trees, "MAX_ENTRIES", 10)  # 1000 + 10 x 2048 bytes in all, headers included
    with pytest.raises(DataError, match="GiB once decompressed"):
        read_members(archive)
    monkeypatch.setattr(trees, "MAX_ENTRIES", 100)
    assert list(read_members(archive)) == [("train", "cat", "0.png")]


def test_data_after_the_end_of_an_archive_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tar_of(make_tree(tmp_path / "imgs"), tmp_path / "d.tar")
    archive.write_bytes(lzma.compress(archive.read_bytes() + bytes(2 * MIB)))
    archive = archive.rename(tmp_path / "d.tar.xz")
    monkeypatch.setattr(trees, "MAX_TAIL_BYTES", MIB)
    one_line_error(archive, tmp_path / "cache", "truncated or corrupted", "after the end-of-archive")


@pytest.mark.parametrize("name", ["d.tar", "d.tar.xz"])
def test_an_archive_cut_at_a_member_boundary_is_refused(tmp_path: Path, name: str) -> None:
    # Every member whole and only the end-of-archive blocks missing: tarfile alone would stop quietly.
    layout = [member(f"{split}/{c}/0.png", png(1)) for split in ("train", "test") for c in ("a", "b")]
    whole = raw_tar(tmp_path / "whole.tar", *layout).read_bytes()
    cut = whole[: whole.rindex(png(1)) + len(png(1))]
    cut += bytes(-len(cut) % tarfile.BLOCKSIZE)  # the last member's padding, no end blocks
    (tmp_path / name).write_bytes(lzma.compress(cut) if name.endswith(".xz") else cut)
    one_line_error(tmp_path / name, tmp_path / "cache", "truncated or corrupted", "no end-of-archive block")


def test_entries_and_total_bytes_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_tree(tmp_path / "imgs")  # 2 splits + 4 class folders + 10 images
    archive = tar_of(root, tmp_path / "d.tar")
    with monkeypatch.context() as tight:
        tight.setattr(trees, "MAX_ENTRIES", 10)
        one_line_error(root, tmp_path / "cache", "holds more than 10 files and folders: too many")
        one_line_error(archive, tmp_path / "cache", "holds more than 10 members: too many")
    with monkeypatch.context() as small_total:
        small_total.setattr(trees, "MAX_TOTAL_BYTES", 300)  # each image is ~100 bytes
        one_line_error(root, tmp_path / "cache", "GiB of images to read: too much")
        with pytest.raises(DataError, match="GiB of members: too much"):  # (the archive itself is over 300 bytes)
            read_members(archive)
    monkeypatch.setattr(trees, "MAX_ENTRIES", 16)
    assert len(walk(FolderTree(root, MIB), sources._is_candidate)[1]) == 10


# ---------------------------------------------------------------------------------------------
# only regular files; links followed or refused, never dropped


def test_a_fifo_is_refused_without_hanging(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "imgs")
    os.mkfifo(root / "train" / "dog" / "0009.png")
    with deadline(20):
        one_line_error(root, tmp_path / "cache", "train/dog/0009.png", "not a regular file (a FIFO)")
    archive = raw_tar(
        tmp_path / "d.tar",
        *[member(f"train/{c}/0.png", png(1)) for c in ("a", "b")],
        *[member(f"test/{c}/0.png", png(1)) for c in ("a", "b")],
        member("train/b/1.png", kind=tarfile.FIFOTYPE),
    )
    one_line_error(archive, tmp_path / "cache", "train/b/1.png", "not a regular file (a FIFO)")


def test_a_link_to_dev_zero_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_tree(tmp_path / "imgs")
    os.symlink("/dev/zero", root / "test" / "cat" / "0009.png")
    forbid_opening(monkeypatch, Path("/dev/zero"))
    with deadline(20):
        one_line_error(
            root, tmp_path / "cache", "test/cat/0009.png", "not a regular file (a link to a character device)"
        )


@pytest.mark.parametrize("kind", ["dangling", "loop", "folder loop"])
def test_broken_links_in_a_folder_are_one_line(tmp_path: Path, kind: str) -> None:
    root = make_tree(tmp_path / "imgs")
    cat = root / "train" / "cat"
    if kind == "dangling":
        os.symlink("gone.png", cat / "0009.png")
        needles = ("train/cat/0009.png is a dangling symlink (to gone.png)", "1 link in all cannot be followed")
    elif kind == "loop":
        os.symlink("0008.png", cat / "0009.png")
        os.symlink("0009.png", cat / "0008.png")
        needles = ("train/cat/0008.png is a symlink loop", "2 links in all cannot be followed")
    else:
        os.symlink("..", cat / "again")
        needles = ("train/cat/again is a symlink loop",)
    with deadline(20):
        one_line_error(root, tmp_path / "cache", *needles)


def add_links(root: Path) -> None:
    """Every kind of link tar(1) keeps: to a sibling, to another class, a hard link, to a file outside the
    layout (an archive reads that member on a second pass), a link to a link, and a linked class folder."""
    os.symlink("0000.png", root / "train" / "cat" / "0100.png")
    os.symlink("../dog/0001.png", root / "train" / "cat" / "0101.png")
    os.link(root / "train" / "dog" / "0000.png", root / "train" / "dog" / "0102.png")
    (root / "pool").mkdir()
    (root / "pool" / "extra.png").write_bytes(png(222))
    os.symlink("../../pool/extra.png", root / "test" / "cat" / "0103.png")
    os.symlink("0103.png", root / "test" / "cat" / "0104.png")
    for split in ("train", "test"):
        os.symlink("cat", root / split / "kitten")


def test_a_folder_with_links_and_its_archives_give_the_same_arrays(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "imgs")
    add_links(root)
    folder = load_image_folder(root, tmp_path / "cache")
    assert folder.classes == ("cat", "dog", "kitten")
    # cat: 3 + 2 links, dog: 3 + 1 hard link, kitten: cat again; test: 2 + 2, 2, 4
    assert folder.train_labels.bincount().tolist() == [5, 4, 5]
    assert folder.test_labels.bincount().tolist() == [4, 2, 4]
    red = folder.train_images[:, 0, 0, 0].tolist()
    assert red[3:5] == [0, 11]  # train/cat/0100.png is cat's 0000, 0101.png is dog's 0001
    assert folder.test_images[2:4, 0, 0, 0].tolist() == [222, 222]
    for name in ("d.tar", "d.tar.xz"):
        archive = tar_of(root, tmp_path / name)
        with tarfile.open(archive) as tar:
            kinds = {m.type for m in tar.getmembers()}
        assert {tarfile.SYMTYPE, tarfile.LNKTYPE} <= kinds  # the links really are links in the archive
        assert_same_splits(load_image_folder(archive, tmp_path / "cache"), folder)


def test_links_an_archive_cannot_follow_are_refused_with_a_count(tmp_path: Path) -> None:
    layout = [member(f"{split}/{c}/0.png", png(1)) for split in ("train", "test") for c in ("a", "b")]
    links = [
        member("train/a/1.png", kind=tarfile.SYMTYPE, target="/etc/passwd"),
        member("train/a/2.png", kind=tarfile.SYMTYPE, target="../../../outside.png"),
        member("train/b/3.png", kind=tarfile.SYMTYPE, target="nothing.png"),
        member("test/b/4.png", kind=tarfile.LNKTYPE, target="train/b/gone.png"),
    ]
    archive = raw_tar(tmp_path / "d.tar.xz", *layout, *links)
    one_line_error(
        archive,
        tmp_path / "cache",
        "test/b/4.png is a link to train/b/gone.png, which is not in the archive",
        "4 links in all cannot be followed",
        "inside the archive",
    )
    loop = [
        member("train/a/5.png", kind=tarfile.SYMTYPE, target="6.png"),
        member("train/a/6.png", kind=tarfile.SYMTYPE, target="5.png"),
    ]
    with deadline(20):
        one_line_error(
            raw_tar(tmp_path / "loop.tar", *layout, *loop),
            tmp_path / "cache",
            "train/a/5.png is a symlink loop",
            "2 links in all",
        )
    outside = raw_tar(tmp_path / "out.tar", *layout, links[0])
    one_line_error(outside, tmp_path / "cache", "train/a/1.png is a link to /etc/passwd, outside the archive")


@pytest.mark.parametrize("where", ["archive", "folder"])
def test_a_path_thousands_of_folders_deep_is_refused_at_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """Looking a path up costs its depth squared: 2,000 folders took minutes before the walk stopped at
    trees.MAX_DEPTH. Counted, not timed: the walk looks up no path deeper than the limit."""
    deep = "train/cat/" + "d/" * 2_000 + "x.png"
    layout = [member(f"{split}/{cls}/{i}.png", png(i)) for split in ("train", "test") for cls in "ab" for i in range(2)]
    tree_class = trees.ArchiveTree if where == "archive" else FolderTree
    if where == "archive":
        source = raw_tar(tmp_path / "deep.tar", *layout, member(deep, png(9)))
    else:
        source = make_tree(tmp_path / "imgs")
        folder = source.joinpath(*deep.split("/")[:102])  # 100 folders under train/cat: within PATH_MAX
        folder.mkdir(parents=True)
        (folder / "x.png").write_bytes(png(9))
    depths, lookup = [], tree_class.lookup

    def counted(self, parts: tuple[str, ...]) -> trees.Node:
        depths.append(len(parts))
        return lookup(self, parts)

    monkeypatch.setattr(tree_class, "lookup", counted)
    one_line_error(source, tmp_path / "cache", "train/cat/d/d/d", f"is {trees.MAX_DEPTH} folders deep", "remove it")
    assert max(depths) == trees.MAX_DEPTH


def test_names_with_control_characters_stay_on_one_line(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "imgs", classes=("cat", "new\nline"))
    (root / "test" / "new\nline" / "0001.png").write_bytes(b"not a png")
    one_line_error(root, tmp_path / "cache", "test/new\\nline/0001.png is not a decodable image")


# ---------------------------------------------------------------------------------------------
# pixel modes


def encoded(image: Image.Image, fmt: str) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    return buffer.getvalue()


def decode(data: bytes) -> np.ndarray:
    return sources._decode_image(data, "x", Path("src"))  # (32, 32, 3) uint8


def test_a_16_bit_png_is_scaled_not_clipped(tmp_path: Path) -> None:
    levels = np.array([0, 256, 257, 32896, 60000, 65535], dtype=np.uint16)
    grey16 = np.resize(levels, (32, 32))  # (32, 32): the levels repeated along each row
    data = encoded(Image.fromarray(grey16), "PNG")
    with Image.open(io.BytesIO(data)) as image:
        assert image.mode in ("I;16", "I")  # 16-bit grey read back: "I" at Pillow 10.1 (the floor), "I;16" later
    expected = np.array([0, 1, 1, 128, 233, 255], dtype=np.uint8)  # round(v / 257)
    assert decode(data)[0, :6].tolist() == [[v, v, v] for v in expected.tolist()]
    # ...and through a folder, as training sees it
    root = make_tree(tmp_path / "imgs")
    (root / "train" / "cat" / "0009.png").write_bytes(data)
    images = load_image_folder(root, tmp_path / "cache").train_images  # cat's 4th image is the 16-bit one
    assert images[3, :, 0, :6].tolist() == [expected.tolist()] * 3


def test_a_16_bit_ppm_is_scaled_too() -> None:
    # PPM/PGM with a 16-bit maxval opens as mode "I"
    data = b"P5 32 32 65535\n" + np.full((32, 32), 51400, dtype=">u2").tobytes()
    assert decode(data)[5, 5].tolist() == [200, 200, 200]


def palette_with_transparency() -> bytes:
    image = Image.new("P", (32, 32), 0)
    image.putpalette([255, 0, 0, 0, 255, 0])  # 0: red, made transparent; 1: green
    image.paste(1, (0, 16, 32, 32))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", transparency=0)
    return buffer.getvalue()


MODES = {  # image -> (the pixel at the top left, the pixel at the bottom right), worked out by hand
    "1": (encoded(Image.new("1", (32, 32), 1), "PNG"), (255, 255, 255), (255, 255, 255)),
    "L": (encoded(Image.new("L", (32, 32), 200), "PNG"), (200, 200, 200), (200, 200, 200)),
    "LA": (encoded(Image.new("LA", (32, 32), (200, 128)), "PNG"), (100, 100, 100), (100, 100, 100)),  # over black
    "RGBA": (encoded(Image.new("RGBA", (32, 32), (200, 100, 50, 128)), "PNG"), (100, 50, 25), (100, 50, 25)),
    "P + transparency": (palette_with_transparency(), (0, 0, 0), (0, 255, 0)),
    "CMYK": (encoded(Image.new("CMYK", (32, 32), (0, 255, 255, 0)), "TIFF"), (255, 0, 0), (255, 0, 0)),
}


@pytest.mark.parametrize("mode", list(MODES))
def test_other_modes_become_rgb(mode: str) -> None:
    data, top_left, bottom_right = MODES[mode]
    rgb = decode(data)
    assert rgb.shape == (32, 32, 3) and rgb.dtype == np.uint8
    assert tuple(rgb[0, 0].tolist()) == top_left and tuple(rgb[31, 31].tolist()) == bottom_right


@pytest.mark.parametrize("mode, needle", [("I", "32-bit integer pixels (mode I)"), ("F", "floating-point pixels")])
def test_pixels_of_no_fixed_range_are_refused(mode: str, needle: str) -> None:
    data = encoded(Image.new(mode, (32, 32), 70000 if mode == "I" else 0.5), "TIFF")
    with pytest.raises(DataError, match=re.escape(needle)) as info:
        decode(data)
    assert "save it as an 8-bit or 16-bit PNG" in str(info.value)
