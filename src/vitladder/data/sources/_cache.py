"""The image folder's cache: decoded arrays saved once under a fingerprint of their source, and the progress
shown while decoding."""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch

from vitladder.atomic import atomic_path
from vitladder.data.sources import ImageSplits
from vitladder.data.trees import Listing, Node
from vitladder.errors import DataError

CACHE_VERSION = 3  # bump when the cache layout or the decoding changes, so old caches are ignored (3: origin)

log = logging.getLogger(__name__)


def fingerprint(path: Path, listing: Listing | None) -> str:
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


def read_cache(path: Path) -> ImageSplits | None:
    try:
        with np.load(path, allow_pickle=False) as z:
            t = {k: torch.from_numpy(z[k]) for k in ("train_images", "train_labels", "test_images", "test_labels")}
            classes, origin = tuple(str(c) for c in z["classes"]), str(z["origin"])
    except Exception:  # a truncated or foreign cache file is never fatal: decode again and overwrite it
        return None
    return ImageSplits(t["train_images"], t["train_labels"], t["test_images"], t["test_labels"], classes, origin=origin)


def write_cache(path: Path, arrays: dict) -> None:
    # Atomic (vitladder.atomic): a crash or a parallel run never leaves half a cache.
    try:
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            np.savez(f, **arrays)
    except OSError as error:
        raise DataError(
            f"could not write the decoded-image cache {path} ({error.strerror or error}): "
            "set data.cache_dir to a writable folder"
        ) from error


@contextlib.contextmanager
def progress(description: str, total: int | None) -> Iterator[Callable[[int], None]]:
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
