"""Where the pixels come from: torchvision's CIFAR-10, an image folder or archive, or a synthetic set.

Every source returns the same thing, an :class:`ImageSplits` of uint8 tensors on the CPU, so the
rest of the pipeline (validation split, device batches, augmentation) never cares which one ran.
Every problem a user can fix is raised as a one-line :class:`~vitladder.errors.DataError`.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import hashlib
import io
import logging
import lzma
import math
import os
import socket
import tarfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

import numpy as np
import torch
from PIL import Image

from vitladder.errors import DataError

IMAGE_SIZE = 32
SPLITS = ("train", "test")
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2")
CACHE_VERSION = 1  # bump when the cache layout changes, so old caches are ignored
DOWNLOAD_TIMEOUT_S = 30.0

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ImageSplits:
    train_images: torch.Tensor  # (N, 3, 32, 32) uint8
    train_labels: torch.Tensor  # (N,) int64
    test_images: torch.Tensor  # (M, 3, 32, 32) uint8
    test_labels: torch.Tensor  # (M,) int64
    classes: tuple[str, ...]


# ---------------------------------------------------------------------------------------------
# torchvision's CIFAR-10


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


def load_cifar10(root: str | Path, download: bool = True) -> ImageSplits:
    """CIFAR-10 from ``root/cifar-10-batches-py`` (checksums verified), downloaded there if needed."""
    from torchvision import datasets  # imported here: only this source needs it

    root = Path(root).expanduser()
    if root.name == "cifar-10-batches-py":  # accept the batches folder itself as well as its parent
        root = root.parent
    local_copy = (
        "use a local copy with data.root=PATH (the folder holding cifar-10-batches-py) "
        "or data=imagefolder data.root=PATH/cifar10-jpeg.tar.xz"
    )
    try:
        with _socket_timeout(DOWNLOAD_TIMEOUT_S):
            train = datasets.CIFAR10(str(root), train=True, download=download)
            test = datasets.CIFAR10(str(root), train=False, download=download)
    except (OSError, RuntimeError) as error:  # URLError and socket.timeout are OSErrors
        if download:
            raise DataError(f"could not download CIFAR-10 into {root} (no network?): {local_copy}") from error
        raise DataError(
            f"CIFAR-10 not found or corrupted in {root} (no valid cifar-10-batches-py): {local_copy}"
        ) from error

    def to_tensors(ds: datasets.CIFAR10) -> tuple[torch.Tensor, torch.Tensor]:
        images = torch.from_numpy(np.ascontiguousarray(ds.data.transpose(0, 3, 1, 2)))  # (N, 3, 32, 32)
        return images, torch.tensor(ds.targets, dtype=torch.int64)

    train_images, train_labels = to_tensors(train)
    test_images, test_labels = to_tensors(test)
    return ImageSplits(train_images, train_labels, test_images, test_labels, tuple(train.classes))


# ---------------------------------------------------------------------------------------------
# An image folder or archive: train/<class>/* and test/<class>/*, decoded once and cached


def _decode_image(data: bytes, name: str, source: Path) -> np.ndarray:
    """One encoded image -> (32, 32, 3) uint8 RGB."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            size = image.size
            if size == (IMAGE_SIZE, IMAGE_SIZE):
                image.load()
                rgb = image if image.mode == "RGB" else image.convert("RGB")
                return np.asarray(rgb, dtype=np.uint8)
    except Exception as error:  # Pillow raises many types for bad files; all mean "not an image"
        raise DataError(
            f"{source}: {name} is not a decodable image ({type(error).__name__}): remove or replace it"
        ) from error
    raise DataError(
        f"{source}: {name} is {size[0]}x{size[1]}, expected {IMAGE_SIZE}x{IMAGE_SIZE}: resize it or remove it"
    )


def _relative_parts(name: str) -> tuple[str, ...]:
    # "./train/cat/1.jpg" and "/train/cat/1.jpg" both become ("train", "cat", "1.jpg").
    return tuple(p for p in PurePosixPath(name).parts if p not in ("/", "."))


def _is_candidate(parts: tuple[str, ...]) -> bool:
    """Could this file be an image at split/class/..., possibly under one wrapping folder?"""
    if any(p.startswith(".") for p in parts):  # .DS_Store, macOS "._x.jpg" twins, .ipynb_checkpoints
        return False
    return (len(parts) >= 3 and parts[0] in SPLITS) or (len(parts) >= 4 and parts[1] in SPLITS)


# An entry while scanning: (path parts, is_dir, read_bytes); read_bytes is called only for candidates.
Entry = tuple[tuple[str, ...], bool, Callable[[], bytes]]


# Compression by magic bytes. We decompress ourselves rather than let tarfile do it ('r|gz'),
# because these readers raise EOFError on a truncated stream where tarfile would quietly stop early.
_DECOMPRESSORS: dict[bytes, Callable[[BinaryIO], BinaryIO]] = {
    b"\x1f\x8b": lambda f: gzip.open(f),
    b"\xfd7zXZ\x00": lambda f: lzma.open(f),
    b"BZh": lambda f: bz2.open(f),
}


def _iter_archive(path: Path, advance: Callable[[int], None]) -> Iterator[Entry]:
    with open(path, "rb") as raw:
        head = raw.read(6)
        raw.seek(0)
        opener = next((open_ for magic, open_ in _DECOMPRESSORS.items() if head.startswith(magic)), None)
        stream = opener(raw) if opener else raw
        # Stream mode ('r|') reads the archive in one pass, without seeking, so it is decompressed once.
        with stream, tarfile.open(fileobj=stream, mode="r|") as archive:
            yield from _members(archive, raw, advance)
            # Read on to the end: a compressed stream checks its end marker and checksum only there,
            # and a tar cut at a member boundary shows only as a missing end-of-archive block.
            while stream.read(1 << 20):
                pass
            if stream.tell() < archive.offset + tarfile.BLOCKSIZE:
                raise tarfile.ReadError("no end-of-archive block")


def _members(archive: tarfile.TarFile, raw: BinaryIO, advance: Callable[[int], None]) -> Iterator[Entry]:
    for member in archive:
        if member.isdir() or member.isfile():
            read = (lambda m=member: archive.extractfile(m).read()) if member.isfile() else bytes
            yield _relative_parts(member.name), member.isdir(), read
            advance(raw.tell())  # compressed bytes consumed: the progress bar's unit


def _walk(path: Path) -> tuple[list[Path], list[Path]]:
    """(directories, files) under path, sorted, following symlinks like the decoder will."""
    dirs, files = [], []
    for directory, _, names in os.walk(path, followlinks=True):
        dirs.append(Path(directory))
        files += [Path(directory, name) for name in names]
    return sorted(dirs), sorted(files)


def _iter_folder(path: Path, dirs: list[Path], files: list[Path], advance: Callable[[int], None]) -> Iterator[Entry]:
    for directory in dirs:
        yield _relative_parts(directory.relative_to(path).as_posix()), True, bytes
    for i, file in enumerate(files):
        yield _relative_parts(file.relative_to(path).as_posix()), False, lambda f=file: _read_file(f)
        advance(i + 1)


def _read_file(file: Path) -> bytes:
    try:
        return file.read_bytes()
    except OSError as error:
        raise DataError(f"could not read {file} ({error.strerror or error}): check its permissions") from error


def _fingerprint(path: Path, files: list[Path] | None) -> str:
    digest = hashlib.sha256(f"vitladder-imagefolder-v{CACHE_VERSION}".encode())
    if files is None:  # archive: its content
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
    else:  # folder: hashing every file would be as slow as decoding, so names, sizes and mtimes
        for file in files:
            stat = file.stat()
            digest.update(f"{file.relative_to(path).as_posix()}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _scan(entries: Iterator[Entry], source: Path) -> tuple[set[tuple[str, ...]], dict[tuple[str, ...], object]]:
    """Decode every candidate image; return (directories, {parts: array or the DataError it raised})."""
    dirs: set[tuple[str, ...]] = set()
    images: dict[tuple[str, ...], object] = {}
    for parts, is_dir, read in entries:
        if not parts:
            continue
        # Archives may omit directory members: every file's parents count as directories.
        dirs.update(parts[:i] for i in range(1, len(parts) if not is_dir else len(parts) + 1))
        if is_dir or not _is_candidate(parts):
            continue
        name = "/".join(parts)
        try:
            images[parts] = _decode_image(read(), name, source)
        except DataError as error:  # kept: it only matters if the file turns out to be in the layout
            images[parts] = error
    return dirs, images


def _assemble(source: Path, dirs: set[tuple[str, ...]], images: dict[tuple[str, ...], object]) -> dict:
    """Find train/ and test/ (maybe under one wrapping folder), check the classes, stack the arrays."""
    tops = {d[0] for d in dirs if len(d) == 1 and not d[0].startswith(".")}
    base: tuple[str, ...] = ()
    if len(tops) == 1 and not tops & set(SPLITS):  # one wrapping folder, e.g. cifar10/train/...
        (top,) = tops
        if any((top, split) in dirs for split in SPLITS):
            base = (top,)
    layout = "expected train/<class>/<image> and test/<class>/<image>, optionally inside one top folder"
    arrays: dict[str, object] = {}
    classes: list[str] = []
    for split in SPLITS:
        prefix = base + (split,)
        if prefix not in dirs:
            raise DataError(f"{source} has no {split}/ folder: {layout}")
        found = sorted({d[len(prefix)] for d in dirs if len(d) > len(prefix) and d[: len(prefix)] == prefix})
        found = [c for c in found if not c.startswith(".")]
        if not found:
            raise DataError(f"{source}: {split}/ has no class folders: {layout}")
        if split == "train":
            classes = found
        elif found != classes:
            missing, extra = sorted(set(classes) - set(found)), sorted(set(found) - set(classes))
            raise DataError(
                f"{source}: test/ classes differ from train/ classes "
                f"(missing in test: {', '.join(missing) or 'none'}; extra in test: {', '.join(extra) or 'none'})"
            )
        stacked, labels = [], []
        for label, name in enumerate(classes):
            cls_prefix = prefix + (name,)
            # Sorted by path, so a folder and its archive give identical arrays whatever the tar order.
            members = sorted(p for p in images if p[: len(cls_prefix)] == cls_prefix)
            if not members:
                raise DataError(f"{source}: class folder {'/'.join(cls_prefix)} has no images")
            for parts in members:
                item = images[parts]
                if isinstance(item, DataError):
                    raise item
                stacked.append(item)
            labels += [label] * len(members)
        arrays[f"{split}_images"] = np.stack(stacked).transpose(0, 3, 1, 2).copy()  # (N, 3, 32, 32)
        arrays[f"{split}_labels"] = np.asarray(labels, dtype=np.int64)
    arrays["classes"] = np.asarray(classes)
    return arrays


def _read_cache(path: Path) -> ImageSplits | None:
    try:
        with np.load(path, allow_pickle=False) as z:
            t = {k: torch.from_numpy(z[k]) for k in ("train_images", "train_labels", "test_images", "test_labels")}
            classes = tuple(str(c) for c in z["classes"])
    except Exception:  # a truncated or foreign cache file is never fatal: decode again and overwrite it
        return None
    return ImageSplits(t["train_images"], t["train_labels"], t["test_images"], t["test_labels"], classes)


def _write_cache(path: Path, arrays: dict) -> None:
    # Written under a temporary name then renamed: a crash or a parallel run never leaves half a cache.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except OSError as error:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise DataError(
            f"could not write the decoded-image cache {path} ({error.strerror or error}): "
            "set data.cache_dir to a writable folder"
        ) from error


@contextlib.contextmanager
def _progress(description: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """Yield advance(completed); draws a bar for big jobs (total given) on a terminal, logs otherwise."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    console = Console(stderr=True)
    if total is None or not console.is_terminal:
        if total is not None:
            log.info("%s (done once, then cached)", description)
        yield lambda completed: None
        return
    columns = (TextColumn("{task.description}"), BarColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda completed: bar.update(task, completed=completed)


def load_image_folder(root: str | Path, cache_dir: str | Path) -> ImageSplits:
    """Images laid out train/<class>/* and test/<class>/*, in a folder or a .tar/.tar.gz/.tar.xz archive.

    Classes are the sorted names of train's subfolders. Every image must be 32x32; each is decoded
    once and the arrays are cached in ``cache_dir`` under a fingerprint of the source.
    """
    source = Path(root).expanduser()
    if not source.exists():
        raise DataError(f"data root {source} does not exist: set data.root to a folder or .tar/.tar.xz archive")
    is_archive = source.is_file() and source.name.lower().endswith(ARCHIVE_SUFFIXES)
    if not source.is_dir() and not is_archive:
        raise DataError(f"data root {source} is neither a folder nor a .tar/.tar.gz/.tar.xz archive")

    dirs, files = (None, None) if is_archive else _walk(source)
    stem = source.name.split(".")[0] or "images"
    cache_path = Path(cache_dir).expanduser() / f"{stem}-{_fingerprint(source, files)[:16]}.npz"
    cached = _read_cache(cache_path) if cache_path.exists() else None
    if cached is not None:
        return cached

    if is_archive:
        size = source.stat().st_size
        with _progress(f"decoding {source.name} once", size if size > 1 << 20 else None) as advance:
            try:
                found_dirs, images = _scan(_iter_archive(source, advance), source)
            except (tarfile.TarError, lzma.LZMAError, zlib.error, EOFError, OSError) as error:
                detail = f"{type(error).__name__}: {error}"[:80]
                raise DataError(f"{source} is truncated or corrupted ({detail}): copy or download it again") from error
    else:
        assert dirs is not None and files is not None
        with _progress(f"decoding {source.name} once", len(files) if len(files) > 2000 else None) as advance:
            found_dirs, images = _scan(_iter_folder(source, dirs, files, advance), source)
    arrays = _assemble(source, found_dirs, images)
    _write_cache(cache_path, arrays)
    return ImageSplits(
        torch.from_numpy(arrays["train_images"]),
        torch.from_numpy(arrays["train_labels"]),
        torch.from_numpy(arrays["test_images"]),
        torch.from_numpy(arrays["test_labels"]),
        tuple(str(c) for c in arrays["classes"]),
    )


# ---------------------------------------------------------------------------------------------
# Synthetic: stripes of 2 orientations x 5 spatial frequencies, learnable in a CPU minute

# Vertical (0 deg) and horizontal (90 deg) stripes are their own mirror images, and a shift only
# moves their phase, so the classes survive the ladder's flip and crop augmentation (a 30-degree
# grating would turn into a 150-degree one under a flip). Telling 2 from 3.5 cycles needs more
# than one 4-px patch: the model has to relate patches.
SYNTHETIC_ORIENTATIONS_DEG = {"grating_0deg": 0.0, "grating_90deg": 90.0}
SYNTHETIC_CYCLES = {"2cyc": 2.0, "3.5cyc": 3.5, "5cyc": 5.0, "7cyc": 7.0, "10cyc": 10.0}  # per image width
SYNTHETIC_CLASSES = tuple(f"{o}_{c}" for c in SYNTHETIC_CYCLES for o in SYNTHETIC_ORIENTATIONS_DEG)


def _synthetic_images(labels: torch.Tensor, image_size: int, generator: torch.Generator) -> torch.Tensor:
    n, num_orientations = labels.numel(), len(SYNTHETIC_ORIENTATIONS_DEG)
    angle = torch.tensor(list(SYNTHETIC_ORIENTATIONS_DEG.values())).deg2rad()[labels % num_orientations]  # (N,)
    cycles = torch.tensor(list(SYNTHETIC_CYCLES.values()))[labels // num_orientations]  # (N,)
    phase = torch.rand(n, generator=generator) * 2 * math.pi  # (N,)
    # Contrast, tint and background follow the same law for every class: no class has its own colour.
    contrast = 0.2 + 0.25 * torch.rand(n, generator=generator)  # (N,)
    tint = 0.3 + 0.7 * torch.rand(n, 3, generator=generator)  # (N, 3) how strongly each channel shows it
    background = 0.3 + 0.4 * torch.rand(n, 3, generator=generator)  # (N, 3)

    coords = (torch.arange(image_size, dtype=torch.float32) + 0.5) / image_size  # (S,) in [0, 1)
    y, x = torch.meshgrid(coords, coords, indexing="ij")  # (S, S)
    along = x * angle.cos()[:, None, None] + y * angle.sin()[:, None, None]  # (N, S, S) in image widths
    wave = torch.sin(2 * math.pi * cycles[:, None, None] * along + phase[:, None, None])  # (N, S, S)
    images = background[:, :, None, None] + (contrast[:, None] * tint)[:, :, None, None] * wave[:, None]
    images = images + 0.1 * torch.randn(images.shape, generator=generator)  # (N, 3, S, S) pixel noise
    return (images.clamp(0, 1) * 255).round().to(torch.uint8)


def make_synthetic(num_train: int, num_test: int, seed: int = 0, image_size: int = 32) -> ImageSplits:
    """A 10-class set of noisy sinusoidal stripes: 2 orientations x 5 spatial frequencies.

    Phase, contrast, colour tint, background colour and pixel noise are random per image, drawn
    from the same laws for every class, so no class differs in mean colour: only the spatial
    pattern tells them apart. Labels cycle through the classes, so the classes are balanced.
    Deterministic given ``seed``.
    """
    if num_train < 0 or num_test < 0 or image_size < 4:
        raise DataError(f"synthetic data needs num_train, num_test >= 0 and image_size >= 4, "
                        f"got {num_train}, {num_test}, {image_size}")
    generator = torch.Generator().manual_seed(seed)
    num_classes = len(SYNTHETIC_CLASSES)

    def split(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        labels = torch.arange(n, dtype=torch.int64) % num_classes
        labels = labels[torch.randperm(n, generator=generator)]
        return _synthetic_images(labels, image_size, generator), labels

    train_images, train_labels = split(num_train)
    test_images, test_labels = split(num_test)
    return ImageSplits(train_images, train_labels, test_images, test_labels, SYNTHETIC_CLASSES)
