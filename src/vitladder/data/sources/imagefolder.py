"""``data=imagefolder``: images laid out train/<class>/* and test/<class>/* (classes: the sorted names of train's
folders), in a folder or a .tar(.gz/.xz/.bz2) archive, optionally under one top folder; decoded once and cached as
uint8 arrays in ``data.cache_dir`` under a fingerprint of the source."""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import rich.progress
import torch
from omegaconf import MISSING, DictConfig
from PIL import Image
from rich.console import Console

from vitladder.atomic import atomic_path
from vitladder.config_schema import DataConfig, setting
from vitladder.data import trees
from vitladder.data.sources import CIFAR10_JPEG, OTHER, ImageSplits
from vitladder.data.trees import ArchiveTree, FolderTree, Listing, Node, Parts, show, too_much, walk
from vitladder.errors import DataError
from vitladder.text import printable

SPLITS = ("train", "test")
LAYOUT = "expected train/<class>/<image> and test/<class>/<image>, optionally inside one top folder"
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2")
DEFAULT_MAX_FILE_MIB = 4  # data.max_file_mib: a 32x32 image takes a few KiB; a file this big is not one
MAX_SIDE = 1024  # px: the largest image the ViT takes (model.vit's img_size bound)
CACHE_VERSION = 3  # bump when the cache layout or the decoding changes, so old caches are ignored (3: origin)

log = logging.getLogger(__name__)


@dataclass
class Config(DataConfig):
    """data=imagefolder's keys (values: conf/data/imagefolder.yaml)."""

    root: str = MISSING
    cache_dir: str = setting(in_recipe=False)  # where the decoded arrays are kept: changes no result
    # MiB: larger files (and archive members) are refused before they are read
    max_file_mib: float = setting(DEFAULT_MAX_FILE_MIB, valid=(lambda v: v > 0, "above 0 (MiB)", "4"), in_recipe=False)


def load(data_cfg: DictConfig) -> ImageSplits:
    return load_image_folder(data_cfg.root, data_cfg.cache_dir, data_cfg.get("max_file_mib", DEFAULT_MAX_FILE_MIB))


def _decode_image(data: bytes, name: str, source: Path) -> np.ndarray:
    """One encoded image of any mode -> (H, W, 3) uint8 RGB."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            if max(image.size) > MAX_SIDE:  # read from the header: refused before it is decoded
                width, height = image.size
                too_big = f"more than {MAX_SIDE} px a side: resize it or remove it"
                raise DataError(f"{source}: {name} is {width}x{height}, {too_big}")
            image.load()
            # 16-bit grey: Pillow's convert("RGB") would clip every value above 255 to white. PNG and PPM hold at
            # most 16 bits, so there an "I" image (older Pillow, PPM) is 16-bit grey too.
            if image.mode.startswith("I;16") or (image.mode == "I" and image.format in ("PNG", "PPM")):
                grey = np.rint(np.asarray(image, dtype=np.float64) / 257).clip(0, 255).astype(np.uint8)  # (H, W)
                return np.repeat(grey[:, :, None], 3, axis=2)
            if image.mode in ("I", "F"):
                raise DataError(
                    f"{source}: {name} has {'32-bit integer' if image.mode == 'I' else 'floating-point'} pixels "
                    f"(mode {image.mode}), whose range is not defined: save it as an 8-bit or 16-bit PNG"
                )
            if image.has_transparency_data:  # alpha, or a transparent palette entry or colour: over black
                return np.asarray(image.convert("RGBA").convert("RGBa"))[:, :, :3]  # premultiplied, rounded
            return np.asarray(image.convert("RGB"), dtype=np.uint8)
    except DataError:
        raise
    except Exception as error:  # Pillow raises many types for bad files; all mean "not an image"
        raise DataError(
            f"{source}: {name} is not a decodable image ({type(error).__name__}): remove or replace it"
        ) from error


def _is_candidate(parts: Parts) -> bool:
    """Could this file be an image at split/class/..., possibly under one top folder?"""
    return (len(parts) >= 3 and parts[0] in SPLITS) or (len(parts) >= 4 and parts[1] in SPLITS)


def _layout(source: Path, dirs: set[Parts], files: dict, classes: list[str]) -> Iterator[tuple[str, Parts, int]]:
    """(split, path, label) of each image of train/ then test/, sorted by path so that a folder and its archive give
    identical arrays whatever the tar order; ``classes`` gets train's class folders. Lazy: a layout error comes where
    the images reach it, after those before it have been checked."""
    tops = [d for d in dirs if len(d) == 1]
    wrapped = len(tops) == 1 and tops[0][0] not in SPLITS and any((*tops[0], s) in dirs for s in SPLITS)
    for split in SPLITS:
        prefix = (*tops[0], split) if wrapped else (split,)
        if prefix not in dirs:
            raise DataError(f"{source} has no {split}/ folder: {LAYOUT}")
        found = sorted(d[-1] for d in dirs if d[:-1] == prefix)  # walk lists every folder above a listed one
        if not found:
            raise DataError(f"{source}: {split}/ has no class folders: {LAYOUT}")
        if split == "train":
            classes += found
        elif found != classes:
            missing = ", ".join(printable(c, 80) for c in sorted(set(classes) - set(found))) or "none"
            extra = ", ".join(printable(c, 80) for c in sorted(set(found) - set(classes))) or "none"
            differ = f"test/ classes differ from train/ classes (missing in test: {missing}; extra in test: {extra})"
            raise DataError(f"{source}: {differ}")
        for label, name in enumerate(classes):
            folder = (*prefix, name)
            if not (members := sorted(p for p in files if p[: len(folder)] == folder)):
                raise DataError(f"{source}: class folder {show(folder)} has no images")
            yield from ((split, parts, label) for parts in members)


def _decode(tree: FolderTree | ArchiveTree, dirs: set[Parts], files: dict[Parts, Node | DataError]) -> dict:
    """The arrays of train/ and test/ and their classes, every image checked: readable, decodable, square and of the
    first's size. One line once the pixels are over trees.MAX_TOTAL_BYTES (small files, huge images)."""
    source, console, pixels, first, classes = tree.source, Console(stderr=True), 0, None, []
    big = len(files) > 2000  # a bar on a terminal, a line in a log, for a job that takes a while
    if big and not console.is_terminal:
        log.info("decoding %s once (done once, then cached)", source.name)
    bar = {"console": console, "transient": True, "disable": not (big and console.is_terminal), "total": len(files)}
    decoded: dict[str, list[tuple[np.ndarray, int]]] = {split: [] for split in SPLITS}
    for split, parts, label in rich.progress.track(
        _layout(source, dirs, files, classes), f"decoding {source.name} once", **bar
    ):
        if isinstance(file := files[parts], DataError):
            raise file
        image = _decode_image(tree.read(parts), show(parts), source)
        first = first or (parts, *image.shape[:2])
        first_parts, side, width = first
        if side != width:
            square = "images must be square: crop or resize them"
            raise DataError(f"{source}: {show(first_parts)} is {width}x{side}: {square}")
        if image.shape[:2] != (side, side):
            raise DataError(
                f"{source}: {show(parts)} is {image.shape[1]}x{image.shape[0]}, expected {side}x{side} "
                f"like {show(first_parts)}: resize it or remove it"
            )
        if (pixels := pixels + image.nbytes) > trees.MAX_TOTAL_BYTES:
            raise DataError(
                f"{source} decodes to over {trees.MAX_TOTAL_BYTES / 2**30:g} GiB of pixels: "
                "too big for one data set of small images; use smaller images or split it"
            )
        decoded[split].append((image, label))
    arrays = {"classes": np.asarray(classes)}
    for split in SPLITS:
        images, labels = zip(*decoded[split])
        arrays[f"{split}_images"] = np.stack(images).transpose(0, 3, 1, 2).copy()  # (N, 3, S, S)
        arrays[f"{split}_labels"] = np.asarray(labels, dtype=np.int64)
    return arrays | {"origin": np.asarray(_origin(arrays, {Path(parts[-1]).suffix.lower() for parts in files}))}


def _origin(arrays: dict, suffixes: set[str]) -> str:
    """CIFAR10_JPEG for CIFAR-10 as JPEG files (its classes, 32x32, 50,000 + 10,000 images: the lossy copy these
    projects share, e.g. ../shared/data/cifar10-jpeg.tar.xz), else OTHER."""
    cifar10 = (
        tuple(str(c) for c in arrays["classes"]) == CIFAR10_CLASSES
        and arrays["train_images"].shape[1:] == (3, 32, 32)
        and (len(arrays["train_labels"]), len(arrays["test_labels"])) == (50_000, 10_000)
    )
    return CIFAR10_JPEG if cifar10 and suffixes <= {".jpg", ".jpeg"} else OTHER


def _fingerprint(source: Path, listing: Listing | None) -> str:
    """An archive's bytes; a folder's names, sizes and mtimes (hashing its files would be as slow as decoding)."""
    digest = hashlib.sha256(f"vitladder-imagefolder-v{CACHE_VERSION}".encode())
    if listing is None:
        with open(source, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
    else:
        files = sorted((parts, getattr(node, "stamp", str(node))) for parts, node in listing[1].items())
        digest.update(repr((sorted(listing[0]), files)).encode())  # repr: any file name, even an undecodable one
    return digest.hexdigest()


def _splits(arrays: Mapping[str, np.ndarray]) -> ImageSplits:  # the decoded arrays, or the cache file's
    tensors = {k: torch.from_numpy(arrays[k]) for k in ("train_images", "train_labels", "test_images", "test_labels")}
    return ImageSplits(**tensors, classes=tuple(str(c) for c in arrays["classes"]), origin=str(arrays["origin"]))


def load_image_folder(
    root: str | Path, cache_dir: str | Path, max_file_mib: float = DEFAULT_MAX_FILE_MIB
) -> ImageSplits:
    """Every image must be square, all of one size (at most MAX_SIDE px a side), at most ``max_file_mib`` MiB."""
    source = Path(root).expanduser()
    number = isinstance(max_file_mib, (int, float)) and not isinstance(max_file_mib, bool)
    if not number or not math.isfinite(max_file_mib) or max_file_mib <= 0:
        raise DataError(
            f"data.max_file_mib={max_file_mib!r} is not valid: it takes a positive number of MiB, "
            f"e.g. data.max_file_mib={DEFAULT_MAX_FILE_MIB}"
        )
    max_file_bytes = max(1, int(max_file_mib * 2**20))
    if not source.exists():
        raise DataError(f"data root {source} does not exist: set data.root to a folder or .tar/.tar.xz archive")
    is_archive = source.is_file() and source.name.lower().endswith(ARCHIVE_SUFFIXES)
    if not source.is_dir() and not is_archive:
        raise DataError(f"data root {source} is neither a folder nor a .tar/.tar.gz/.tar.xz archive")
    if is_archive and source.stat().st_size > trees.MAX_TOTAL_BYTES:  # before the fingerprint reads it all
        raise too_much(f"{source} is over {trees.MAX_TOTAL_BYTES / 2**30:g} GiB: too big")

    folder = None if is_archive else FolderTree(source, max_file_bytes)
    listing = folder and walk(folder, _is_candidate)
    name = f"{source.name.split('.')[0] or 'images'}-{_fingerprint(source, listing)[:16]}.npz"
    cache_path = Path(cache_dir).expanduser() / name
    # No cache yet, or a truncated or foreign file: never fatal, the source is decoded again and the file replaced.
    with contextlib.suppress(Exception), np.load(cache_path, allow_pickle=False) as cached:
        return _splits(cached)

    tree = folder or ArchiveTree(source, max_file_bytes)
    arrays = _decode(tree, *(listing or walk(tree, _is_candidate)))
    try:  # atomic: a crash or a parallel run never leaves half a cache
        with atomic_path(cache_path) as tmp, open(tmp, "wb") as f:
            np.savez(f, **arrays)
    except OSError as error:
        raise DataError(
            f"could not write the decoded-image cache {cache_path} ({error.strerror or error}): "
            "set data.cache_dir to a writable folder"
        ) from error
    return _splits(arrays)
