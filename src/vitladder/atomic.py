"""Write every output to a temporary name and rename it, so a killed run or a full disk never leaves half a file:
the previous version stays in place until the new one is complete and on disk."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def fsync(path: Path) -> None:
    """Flushes a file, or a folder's entries (a rename), to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yields a temporary path beside `path` (the rename never crosses file systems); if the block succeeds, the
    file is flushed to disk and renamed onto `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    tmp.touch(exist_ok=False)  # the name reserved (O_EXCL), with open()'s permissions
    try:
        yield tmp
        fsync(tmp)  # the data is on disk before the name points at it
        os.replace(tmp, path)
        with contextlib.suppress(OSError):  # not every platform or file system can flush a folder
            fsync(path.parent)
    except OSError as error:
        error.filename = error.filename or str(path)  # a failed write() names no file: the one-line error needs one
        raise
    finally:
        tmp.unlink(missing_ok=True)


def remove_leftovers(folder: str | Path) -> list[Path]:
    """Deletes (and returns) the temporary files of writers killed mid-write in ``folder`` and below; only for a
    folder no other process writes to (a run folder under its lock)."""
    leftovers = sorted(path for path in Path(folder).rglob(".*.tmp") if path.is_file())  # atomic_path's names
    for path in leftovers:
        path.unlink(missing_ok=True)
    return leftovers


def write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | Path, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


# torch and safetensors write through a Python file, so that a full disk is an OSError naming the path (torch's own
# writer raises a RuntimeError without one). safe_load.load_checkpoint_file reads the metadata back, each value JSON.
def save_torch(obj: Any, path: str | Path) -> None:
    import torch

    with atomic_path(path) as tmp, tmp.open("wb") as file:
        torch.save(obj, file)


def save_safetensors(tensors: dict, metadata: dict[str, Any], path: str | Path) -> None:
    from safetensors.torch import save

    with atomic_path(path) as tmp:
        tmp.write_bytes(save(tensors, {key: json.dumps(value) for key, value in metadata.items()}))
