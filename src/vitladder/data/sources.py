"""Where the pixels come from: torchvision's CIFAR-10, an image folder or archive, or a synthetic set.

Every source returns the same thing, an :class:`ImageSplits` of uint8 tensors on the CPU, so the
rest of the pipeline (validation split, device batches, augmentation) never cares which one ran.
Every problem a user can fix is raised as a one-line :class:`~vitladder.errors.DataError`.
"""

from __future__ import annotations

import contextlib
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
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from vitladder.data.trees import FolderTree, Limits, Listing, Node, Parts, read_archive, read_folder, show, walk
from vitladder.errors import DataError
from vitladder.text import printable

IMAGE_SIZE = 32
SPLITS = ("train", "test")
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2")
CACHE_VERSION = 2  # bump when the cache layout or the decoding changes, so old caches are ignored
DOWNLOAD_TIMEOUT_S = 30.0

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ImageSplits:
    train_images: torch.Tensor  # (N, 3, 32, 32) uint8
    train_labels: torch.Tensor  # (N,) int64
    test_images: torch.Tensor  # (M, 3, 32, 32) uint8
    test_labels: torch.Tensor  # (M,) int64
    classes: tuple[str, ...]
    # True when the test images come in the dataset's official order (torchvision's CIFAR-10), so
    # "the first N test images" means the published ones; False for files grouped by class.
    official_test_order: bool = False


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
    return ImageSplits(
        train_images, train_labels, test_images, test_labels, tuple(train.classes), official_test_order=True
    )


# ---------------------------------------------------------------------------------------------
# An image folder or archive: train/<class>/* and test/<class>/*, decoded once and cached

DEFAULT_MAX_FILE_MIB = 4  # data.max_file_mib: a 32x32 image takes a few KiB; a file this big is not one
_SIXTEEN_BIT = ("I;16", "I;16L", "I;16B", "I;16N")


def _to_rgb(image: Image.Image, name: str, source: Path) -> np.ndarray:
    """A loaded image of any mode -> (H, W, 3) uint8 RGB."""
    mode = image.mode
    # 16-bit grey: Pillow's convert("RGB") would clip every value above 255 to white. PNG and PPM
    # hold at most 16 bits, so there an "I" image (older Pillow, PPM) is 16-bit grey too.
    if mode in _SIXTEEN_BIT or (mode == "I" and image.format in ("PNG", "PPM")):
        grey = np.rint(np.asarray(image, dtype=np.float64) / 257).clip(0, 255).astype(np.uint8)  # (H, W): 65535 -> 255
        return np.repeat(grey[:, :, None], 3, axis=2)
    if mode in ("I", "F"):
        raise DataError(
            f"{source}: {name} has {'32-bit integer' if mode == 'I' else 'floating-point'} pixels "
            f"(mode {mode}), whose range is not defined: save it as an 8-bit or 16-bit PNG"
        )
    if image.has_transparency_data:  # alpha, or a transparent palette entry or colour: over black
        rgba = np.asarray(image.convert("RGBA"), dtype=np.uint16)  # (H, W, 4)
        return ((rgba[:, :, :3] * rgba[:, :, 3:] + 127) // 255).astype(np.uint8)
    return np.asarray(image if mode == "RGB" else image.convert("RGB"), dtype=np.uint8)


def _decode_image(data: bytes, name: str, source: Path) -> np.ndarray:
    """One encoded image -> (32, 32, 3) uint8 RGB."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            size = image.size
            if size == (IMAGE_SIZE, IMAGE_SIZE):
                image.load()
                return _to_rgb(image, name, source)
    except DataError:
        raise
    except Exception as error:  # Pillow raises many types for bad files; all mean "not an image"
        raise DataError(
            f"{source}: {name} is not a decodable image ({type(error).__name__}): remove or replace it"
        ) from error
    raise DataError(
        f"{source}: {name} is {size[0]}x{size[1]}, expected {IMAGE_SIZE}x{IMAGE_SIZE}: resize it or remove it"
    )


def _decoder(source: Path) -> Callable[[bytes, Parts], object]:
    def decode(data: bytes, parts: Parts) -> object:
        try:
            return _decode_image(data, show(parts), source)
        except DataError as error:  # kept: it only matters if the file turns out to be in the layout
            return error

    return decode


def _is_candidate(parts: Parts) -> bool:
    """Could this file be an image at split/class/..., possibly under one wrapping folder?"""
    if any(p.startswith(".") for p in parts):  # .DS_Store, macOS "._x.jpg" twins, .ipynb_checkpoints
        return False
    return (len(parts) >= 3 and parts[0] in SPLITS) or (len(parts) >= 4 and parts[1] in SPLITS)


def _limits(max_file_mib: object) -> Limits:
    ok = isinstance(max_file_mib, (int, float)) and not isinstance(max_file_mib, bool)
    if not ok or not math.isfinite(max_file_mib) or max_file_mib <= 0:
        raise DataError(
            f"data.max_file_mib={max_file_mib!r} is not valid: it takes a positive number of MiB, "
            f"e.g. data.max_file_mib={DEFAULT_MAX_FILE_MIB}"
        )
    return Limits(max_file_bytes=max(1, int(max_file_mib * 2**20)))


def _fingerprint(path: Path, listing: Listing | None) -> str:
    digest = hashlib.sha256(f"vitladder-imagefolder-v{CACHE_VERSION}".encode())
    if listing is None:  # archive: its content
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
    else:  # folder: hashing every file would be as slow as decoding, so names, sizes and mtimes
        lines = [f"d\0{chr(0).join(parts)}" for parts in sorted(listing.dirs)]
        lines += [
            f"f\0{chr(0).join(parts)}\0{node.stamp if isinstance(node, Node) else node}"
            for parts, node in sorted(listing.files.items())
        ]
        for line in lines:
            digest.update(f"{line}\n".encode("utf-8", "surrogateescape"))  # any file name, even undecodable
    return digest.hexdigest()


def _assemble(source: Path, dirs: set[Parts], images: dict[Parts, object]) -> dict:
    """Find train/ and test/ (maybe under one wrapping folder), check the classes, stack the arrays."""
    tops = {d[0] for d in dirs if len(d) == 1 and not d[0].startswith(".")}
    base: Parts = ()
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
                f"(missing in test: {', '.join(printable(c, 80) for c in missing) or 'none'}; "
                f"extra in test: {', '.join(printable(c, 80) for c in extra) or 'none'})"
            )
        stacked, labels = [], []
        for label, name in enumerate(classes):
            cls_prefix = prefix + (name,)
            # Sorted by path, so a folder and its archive give identical arrays whatever the tar order.
            members = sorted(p for p in images if p[: len(cls_prefix)] == cls_prefix)
            if not members:
                raise DataError(f"{source}: class folder {show(cls_prefix)} has no images")
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


def load_image_folder(
    root: str | Path, cache_dir: str | Path, max_file_mib: float = DEFAULT_MAX_FILE_MIB
) -> ImageSplits:
    """Images laid out train/<class>/* and test/<class>/*, in a folder or a .tar/.tar.gz/.tar.xz archive.

    Classes are the sorted names of train's subfolders. Every image must be 32x32 and at most
    ``max_file_mib`` MiB; links are followed (inside an archive, to the member they name), and only
    regular files are read. Each image is decoded once and the arrays are cached in ``cache_dir``
    under a fingerprint of the source.
    """
    source = Path(root).expanduser()
    limits = _limits(max_file_mib)
    if not source.exists():
        raise DataError(f"data root {source} does not exist: set data.root to a folder or .tar/.tar.xz archive")
    is_archive = source.is_file() and source.name.lower().endswith(ARCHIVE_SUFFIXES)
    if not source.is_dir() and not is_archive:
        raise DataError(f"data root {source} is neither a folder nor a .tar/.tar.gz/.tar.xz archive")
    size = source.stat().st_size
    if is_archive and size > limits.max_total_bytes:  # checked before the fingerprint reads it all
        raise DataError(
            f"{source} is over {limits.max_total_bytes / 2**30:g} GiB: "
            "too big for one data set of small images; split it"
        )

    folder = None if is_archive else FolderTree(source)
    listing = None if folder is None else walk(folder, source, limits, _is_candidate)
    stem = source.name.split(".")[0] or "images"
    cache_path = Path(cache_dir).expanduser() / f"{stem}-{_fingerprint(source, listing)[:16]}.npz"
    cached = _read_cache(cache_path) if cache_path.exists() else None
    if cached is not None:
        return cached

    decode = _decoder(source)
    if folder is None:
        with _progress(f"decoding {source.name} once", size if size > 1 << 20 else None) as advance:
            try:
                dirs, images = read_archive(source, limits, _is_candidate, decode, advance)
            except (tarfile.TarError, lzma.LZMAError, zlib.error, EOFError, OSError) as error:
                detail = f"{type(error).__name__}: {error}"[:80]
                raise DataError(f"{source} is truncated or corrupted ({detail}): copy or download it again") from error
    else:
        assert listing is not None
        total = len(listing.files)
        with _progress(f"decoding {source.name} once", total if total > 2000 else None) as advance:
            dirs, images = listing.dirs, read_folder(folder, listing, source, limits, decode, advance)
    arrays = _assemble(source, dirs, images)
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
        raise DataError(
            f"synthetic data needs num_train, num_test >= 0 and image_size >= 4, "
            f"got {num_train}, {num_test}, {image_size}"
        )
    generator = torch.Generator().manual_seed(seed)
    num_classes = len(SYNTHETIC_CLASSES)

    def split(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        labels = torch.arange(n, dtype=torch.int64) % num_classes
        labels = labels[torch.randperm(n, generator=generator)]
        return _synthetic_images(labels, image_size, generator), labels

    train_images, train_labels = split(num_train)
    test_images, test_labels = split(num_test)
    return ImageSplits(train_images, train_labels, test_images, test_labels, SYNTHETIC_CLASSES)
