"""One process per run folder: `flock` on `<run>/.lock` (filelock), held from before config.yaml until done.json (on
several devices by rank 0). The kernel releases it when its holder exits, killed or not; the holder's pid in the
file lets a second process say who holds the rung."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from filelock import FileLock, Timeout

from vitladder.errors import UserError

LOCK_FILE = ".lock"


class RunLocked(UserError):
    """Another process is training (or finishing) this rung."""


def holder_pid(lock_file: Path) -> str:
    try:
        text = lock_file.read_bytes()[:32].decode("ascii", errors="replace").strip()
    except OSError:
        return "unknown"
    return text if text.isdigit() else "unknown"


@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Creates `run_dir` and holds its lock for the block; RunLocked at once if another process holds it. Creating
    the lock file is also the check that the folder can be written."""
    lock_file = run_dir / LOCK_FILE
    lock = FileLock(lock_file, timeout=0)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        lock.acquire()
    except Timeout:
        raise RunLocked(
            f"{run_dir} is in use by another process (pid {holder_pid(lock_file)}): wait for it to finish, "
            "or stop it and run the same command again to resume"
        ) from None
    except OSError as error:
        raise UserError(
            f"cannot write to the output folder {run_dir} ({error.strerror}): choose another with output_root=PATH"
        ) from None
    try:
        lock_file.write_text(f"{os.getpid()}\n")  # in place, not renamed: a new inode would be unlocked
        yield
    finally:
        with suppress(OSError):
            lock_file.write_text("")  # no pid of a finished process left behind
        lock.release()
