"""``data=imagefolder``: images laid out train/<class>/* and test/<class>/*, in a folder or a .tar/.tar.gz/.tar.xz
archive, decoded once and cached as uint8 arrays (``data.cache_dir``)."""

from __future__ import annotations

import io
import lzma
import math
import tarfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from omegaconf import MISSING, DictConfig
from PIL import Image

from vitladder.config_schema import DataConfig, setting
from vitladder.data.sources import CIFAR10_JPEG, OTHER, ImageSplits
from vitladder.data.sources._cache import fingerprint, progress, read_cache, write_cache
from vitladder.data.trees import FolderTree, Limits, Parts, read_archive, read_folder, show, walk
from vitladder.errors import DataError
from vitladder.text import printable

SPLITS = ("train", "test")
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2")

DEFAULT_MAX_FILE_MIB = 4  # data.max_file_mib: a 32x32 image takes a few KiB; a file this big is not one
MAX_SIDE = 1024  # px: the largest image the ViT takes (model.vit's img_size bound)
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
    """One encoded image -> (H, W, 3) uint8 RGB; its size is checked against the others in _assemble."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            size = image.size
            if max(size) <= MAX_SIDE:  # read from the header: a huge image is refused before it is decoded
                image.load()
                return _to_rgb(image, name, source)
    except DataError:
        raise
    except Exception as error:  # Pillow raises many types for bad files; all mean "not an image"
        raise DataError(
            f"{source}: {name} is not a decodable image ({type(error).__name__}): remove or replace it"
        ) from error
    raise DataError(f"{source}: {name} is {size[0]}x{size[1]}, more than {MAX_SIDE} px a side: resize it or remove it")


def _decoder(source: Path, limits: Limits) -> Callable[[bytes, Parts], object]:
    decoded = 0  # bytes of decoded pixels so far: small files can decode to huge arrays

    def decode(data: bytes, parts: Parts) -> object:
        nonlocal decoded
        try:
            pixels = _decode_image(data, show(parts), source)
        except DataError as error:  # kept: it only matters if the file turns out to be in the layout
            return error
        decoded += pixels.nbytes
        if decoded > limits.max_total_bytes:
            raise DataError(
                f"{source} decodes to over {limits.max_total_bytes / 2**30:g} GiB of pixels: "
                "too big for one data set of small images; use smaller images or split it"
            )
        return pixels

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


def _check_size(source: Path, parts: Parts, image: np.ndarray, first: tuple[Parts, tuple[int, ...]]) -> None:
    """Every image is square and of the first train image's size (the model takes one size)."""
    (height, width, _), (first_parts, (side, first_width, _)) = image.shape, first
    if side != first_width:
        raise DataError(
            f"{source}: {show(first_parts)} is {first_width}x{side}: images must be square: crop or resize them"
        )
    if (height, width) != (side, side):
        raise DataError(
            f"{source}: {show(parts)} is {width}x{height}, expected {side}x{side} like {show(first_parts)}: "
            "resize it or remove it"
        )


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
    first: tuple[Parts, tuple[int, ...]] | None = None  # the first train image: every other has its size
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
                first = first or (parts, item.shape)
                _check_size(source, parts, item, first)
                stacked.append(item)
            labels += [label] * len(members)
        arrays[f"{split}_images"] = np.stack(stacked).transpose(0, 3, 1, 2).copy()  # (N, 3, S, S)
        arrays[f"{split}_labels"] = np.asarray(labels, dtype=np.int64)
    arrays["classes"] = np.asarray(classes)
    return arrays


@dataclass
class Config(DataConfig):
    """data=imagefolder's keys (values: conf/data/imagefolder.yaml)."""

    root: str = MISSING
    cache_dir: str = setting(in_recipe=False)  # where the decoded arrays are kept: changes no result
    # MiB: larger files (and archive members) are refused before they are read
    max_file_mib: float = setting(DEFAULT_MAX_FILE_MIB, valid=(lambda v: v > 0, "above 0 (MiB)", "4"), in_recipe=False)


def load(data_cfg: DictConfig) -> ImageSplits:
    return load_image_folder(
        Path(data_cfg.root),
        cache_dir=Path(data_cfg.cache_dir),
        max_file_mib=data_cfg.get("max_file_mib", DEFAULT_MAX_FILE_MIB),
    )


def load_image_folder(
    root: str | Path, cache_dir: str | Path, max_file_mib: float = DEFAULT_MAX_FILE_MIB
) -> ImageSplits:
    """Images laid out train/<class>/* and test/<class>/*, in a folder or a .tar/.tar.gz/.tar.xz archive.

    Classes are the sorted names of train's subfolders. Every image must be square, all of one size (at most
    MAX_SIDE px a side), and at most ``max_file_mib`` MiB; links are followed (inside an archive, to the member
    they name), and only regular files are read. Each image is decoded once and the arrays are cached in ``cache_dir``
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
    cache_path = Path(cache_dir).expanduser() / f"{stem}-{fingerprint(source, listing)[:16]}.npz"
    cached = read_cache(cache_path) if cache_path.exists() else None
    if cached is not None:
        return cached

    decode = _decoder(source, limits)
    if folder is None:
        with progress(f"decoding {source.name} once", size if size > 1 << 20 else None) as advance:
            try:
                dirs, images = read_archive(source, limits, _is_candidate, decode, advance)
            except (tarfile.TarError, lzma.LZMAError, zlib.error, EOFError, OSError, ValueError) as error:
                detail = f"{type(error).__name__}: {error}"[:80]
                raise DataError(f"{source} is truncated or corrupted ({detail}): copy or download it again") from error
    else:
        assert listing is not None
        total = len(listing.files)
        with progress(f"decoding {source.name} once", total if total > 2000 else None) as advance:
            dirs, images = listing.dirs, read_folder(folder, listing, source, limits, decode, advance)
    arrays = _assemble(source, dirs, images)
    arrays["origin"] = np.asarray(_origin(arrays, {Path(parts[-1]).suffix.lower() for parts in images}))
    write_cache(cache_path, arrays)
    return ImageSplits(
        torch.from_numpy(arrays["train_images"]),
        torch.from_numpy(arrays["train_labels"]),
        torch.from_numpy(arrays["test_images"]),
        torch.from_numpy(arrays["test_labels"]),
        tuple(str(c) for c in arrays["classes"]),
        origin=str(arrays["origin"]),
    )


def _origin(arrays: dict, suffixes: set[str]) -> str:
    """CIFAR10_JPEG for CIFAR-10 as JPEG files (its classes, 32x32, 50,000 + 10,000 images: the lossy copy these
    projects share, e.g. ../shared/data/cifar10-jpeg.tar.xz), else OTHER."""
    cifar10 = (
        tuple(str(c) for c in arrays["classes"]) == CIFAR10_CLASSES
        and arrays["train_images"].shape[1:] == (3, 32, 32)
        and (len(arrays["train_labels"]), len(arrays["test_labels"])) == (50_000, 10_000)
    )
    return CIFAR10_JPEG if cifar10 and suffixes <= {".jpg", ".jpeg"} else OTHER
