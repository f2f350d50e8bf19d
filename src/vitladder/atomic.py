"""Write every output to a temporary name and rename it, so a killed run or a full disk never leaves
half a file: the previous version stays in place until the new one is complete and on disk."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def current_umask() -> int:
    """The process umask. Linux shows it in /proc (no side effect); elsewhere it is set and restored."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_dir(folder: Path) -> None:
    """Makes a rename durable (the directory entry); not every platform or file system allows it."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yields a temporary path beside `path` (same folder, so the rename never crosses file systems);
    if the block succeeds, the file is flushed to disk, given the umask's mode and renamed onto `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)  # the data is on disk before the name points at it
        finally:
            os.close(fd)
        os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp creates 0600; outputs get the usual mode
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except OSError as error:
        if error.filename is None:  # a failed write() names no file: name the output for the one-line error
            error.filename = str(path)
        raise
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


TEMPORARY_GLOB = ".*.tmp"  # atomic_path's temporary names: .<name>.<random>.tmp


def remove_leftovers(folder: str | Path) -> list[Path]:
    """Deletes the temporary files that writers killed mid-write (SIGKILL, power loss) left in ``folder``
    and below; returns them. Only for a folder no other process is writing to (a run folder under its lock)."""
    leftovers = sorted(path for path in Path(folder).rglob(TEMPORARY_GLOB) if path.is_file())
    for path in leftovers:
        path.unlink(missing_ok=True)
    return leftovers


def write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | Path, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def save_torch(obj: Any, path: str | Path) -> None:
    """torch.save through a Python file, so that a full disk is an OSError naming `path` (torch's own
    writer turns it into a RuntimeError without a path)."""
    import torch

    with atomic_path(path) as tmp, tmp.open("wb") as file:
        torch.save(obj, file)


def save_safetensors(tensors: dict, metadata: dict[str, Any], path: str | Path) -> None:
    """A safetensors file whose header holds ``metadata``, each value as JSON (safe_load.load_checkpoint_file reads
    it back); written through a Python file, so that a full disk is an OSError naming `path`."""
    from safetensors.torch import save

    with atomic_path(path) as tmp:
        tmp.write_bytes(save(tensors, {key: json.dumps(value) for key, value in metadata.items()}))
