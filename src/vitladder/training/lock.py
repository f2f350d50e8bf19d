"""One process per run folder: an exclusive lock held from before config.yaml is written until done.json.

The lock is `flock` on `<run>/.lock` (filelock): the kernel releases it when its holder exits, killed
or not, so a stale lock of a dead process is simply taken over. The holder writes its pid into the
file, so that a second process can say who holds the rung. On several devices rank 0 holds it: the other ranks
of its run write nothing in the folder and take no lock (training/ranks.py).
"""

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
        with lock_file.open("rb") as file:
            text = file.read(32).decode("ascii", errors="replace").strip()
    except OSError:
        return "unknown"
    return text if text.isdigit() else "unknown"


@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Creates `run_dir` and holds its lock for the block; RunLocked at once (no waiting) if another
    process holds it. Creating the lock file is also the check that the folder can be written."""
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
        # Written in place, not renamed: a new inode would be a new, unlocked lock file.
        lock_file.write_text(f"{os.getpid()}\n")
        yield
    finally:
        with suppress(OSError):
            lock_file.write_text("")  # no pid of a finished process left behind
        lock.release()
