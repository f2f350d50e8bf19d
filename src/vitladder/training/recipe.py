"""A run folder belongs to one recipe, its resolved config.yaml: a finished rung is skipped, and an interrupted one
resumed, only when the config that would run now is the same outside the keys its schema marks
``setting(in_recipe=False)``. provenance.json, written with it, records what made the run and every key's default
then, so that an upgrade keeps the run: a setting added since is no change while it stands at its default now, one
removed since none if it stood at its default then (docs/design.md §5). And one process per run folder: its lock,
held from before config.yaml until done.json (on several devices by rank 0)."""

from __future__ import annotations

import functools
import inspect
import json
import logging
import os
import platform
import subprocess
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from importlib import metadata
from pathlib import Path
from typing import Any

import lightning as L
from filelock import FileLock, Timeout
from omegaconf import DictConfig, OmegaConf

from vitladder.atomic import write_json, write_text
from vitladder.config import CONF_DIR, base_values, flatten
from vitladder.config_schema import outside_the_recipe
from vitladder.errors import UserError
from vitladder.run_folder import RunPaths

log = logging.getLogger(__name__)

ABSENT = "(absent)"
SHOWN_CHANGES = 6  # a longer list ends with "and N more"
LIBRARIES = ("torch", "lightning", "timm", "hydra-core", "wandb")
SUPPLIED_BY_THE_RUN = ("logger", "callbacks", "plugins")  # Trainer arguments the config does not hold
LOCK_FILE = ".lock"


class RunLocked(UserError):
    """Another process is training (or finishing, or analysing) this rung."""


def holder_pid(lock_file: Path) -> str:
    with suppress(OSError):
        text = lock_file.read_bytes()[:32].decode("ascii", errors="replace").strip()
        return text if text.isdigit() else "unknown"
    return "unknown"


@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Creates `run_dir` and holds its lock, `flock` on `<run>/.lock`, for the block; RunLocked at once if another
    process holds it. The kernel releases it when its holder exits, killed or not; the holder's pid in the file lets
    a second process say who holds the rung. Creating the file is also the check that the folder can be written."""
    lock_file = run_dir / LOCK_FILE
    lock = FileLock(lock_file, timeout=0)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        lock.acquire()
    except Timeout:
        raise RunLocked(
            f"{run_dir} is in use by another process (pid {holder_pid(lock_file)}): wait for it to finish, or stop "
            "it (a stopped training resumes where it stopped), and run this command again"
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


def _version(package: str) -> str | None:
    with suppress(metadata.PackageNotFoundError):
        return metadata.version(package)
    return None


def _git(*args: str) -> str | None:
    with suppress(OSError, subprocess.TimeoutExpired):
        done = subprocess.run(["git", "-C", str(CONF_DIR.parent), *args], capture_output=True, text=True, timeout=10)
        return done.stdout.strip() if done.returncode == 0 else None
    return None


@functools.cache
def versions() -> dict[str, str | None]:
    """The project's version and git commit (``-dirty`` when tracked files differ; None outside a git checkout of
    it, such as an installed copy inside another repository), Python's and the libraries'."""
    top = _git("rev-parse", "--show-toplevel")
    ours = top is not None and CONF_DIR.parent.samefile(top)
    return {
        "vitladder": _version("vitladder"),
        "git_commit": _git("describe", "--always", "--dirty", "--abbrev=12", "--exclude=*") if ours else None,
        "python": platform.python_version(),
        **{name: _version(name) for name in LIBRARIES},
    }


def key_defaults(cfg: DictConfig) -> dict[str, Any]:
    """Every dotted key's default: its value in conf/ before any rung or command line (else the schema's), for the
    run's data source; for trainer.* Lightning's own, from the installed Trainer's signature."""
    trainer = inspect.signature(L.Trainer).parameters.items()
    lightnings = {f"trainer.{name}": p.default for name, p in trainer if name not in SUPPLIED_BY_THE_RUN}
    return {**flatten(base_values(str(cfg.data.source))), **lightnings}


def write_recipe(paths: RunPaths, cfg: DictConfig, overrides: list[str] | None) -> None:
    write_text(paths.config, OmegaConf.to_yaml(cfg, resolve=True))
    write_json(paths.provenance, {"versions": versions(), "defaults": key_defaults(cfg)})
    if overrides is not None:
        write_text(paths.overrides, OmegaConf.to_yaml(OmegaConf.create(list(overrides))))


def in_recipe(key: str, outside: tuple[str, ...] | None = None) -> bool:
    outside = outside_the_recipe() if outside is None else outside
    return not any(key == name or key.startswith(f"{name}.") for name in outside)


def recipe_changes(
    stored: dict, current: dict, defaults_then: dict | None = None, defaults_now: dict | None = None
) -> list[tuple[str, Any, Any]]:
    """(key, stored value, current value) for every recipe key that differs, both configs resolved; a key only one
    config has is no change at its default (now for the current's, then for the stored's: key_defaults)."""
    old, new, outside = flatten(stored), flatten(current), outside_the_recipe()
    then, now = defaults_then or {}, defaults_now or {}
    return [
        (key, old.get(key, ABSENT), new.get(key, ABSENT))
        for key in sorted(old.keys() | new.keys())
        if in_recipe(key, outside) and old.get(key, now.get(key, ABSENT)) != new.get(key, then.get(key, ABSENT))
    ]


def _read(load, path: Path) -> dict | None:
    """A stored file's mapping; None when it is missing, unreadable or not a mapping."""
    with suppress(Exception):  # missing or unreadable: what it held is unknown
        stored = load(path)
        return stored if isinstance(stored, dict) else None
    return None


def replaces_old_run(cfg: DictConfig) -> bool:
    """Whether cfg's run folder holds a finished or interrupted run of another recipe, to be moved aside
    (overwrite=true; without it a UserError). A fresh folder or the same recipe: False."""
    paths = RunPaths(cfg.run_dir)
    finished = paths.done.exists()
    if not (finished or paths.last_ckpt.exists()):
        return False  # nothing trained there to reuse
    made = _read(lambda path: json.loads(path.read_text()), paths.provenance) or {}
    stored = _read(lambda path: OmegaConf.to_container(OmegaConf.load(path)), paths.config)
    changes = []
    if stored is not None:
        current, then = OmegaConf.to_container(cfg, resolve=True), made.get("defaults", {})
        changes = recipe_changes(stored, current, then, key_defaults(cfg))
        if not changes:
            old, new = flatten(stored), flatten(current)
            dropped = sorted(k for k, v in old.items() if k not in new and then.get(k, ABSENT) == v and in_recipe(k))
            if dropped:  # warned in one place: once
                settings = "is a setting" if len(dropped) == 1 else "are settings"
                kept = "the run stood at the default, so it is kept as the same recipe"
                warnings.warn(f"{paths.root}: {', '.join(dropped)} no longer {settings}; {kept}", stacklevel=1)
            return False
    if not cfg.overwrite:
        now, made_with = versions(), made.get("versions", {})
        made_by = [f"{name} {_show(v)} → {_show(now.get(name))}" for name, v in made_with.items() if v != now.get(name)]
        raise UserError(changed_recipe_message(paths.root, changes, finished, made_by))
    return True


def _show(value: Any) -> str:
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value).replace(" ", "")


def listed_changes(changes: list[tuple[str, Any, Any]]) -> str:
    """``key old → new`` for each of the first SHOWN_CHANGES changes (recipe_changes), and how many more."""
    listed = ", ".join(f"{key} {_show(old)} → {_show(new)}" for key, old, new in changes[:SHOWN_CHANGES])
    return listed + (f" and {len(changes) - SHOWN_CHANGES} more" if len(changes) > SHOWN_CHANGES else "")


def changed_recipe_message(
    run_dir: Path, changes: list[tuple[str, Any, Any]], finished: bool, made_by: list[str] | tuple = ()
) -> str:
    """One line: what changed (and what made the folder, where that differs from now), and the two ways on."""
    state = "a finished run" if finished else "an interrupted run"
    made = [f"made with {', '.join(made_by)}"] if made_by else []
    if changes:
        what = f"{state} of another recipe ({'; '.join([listed_changes(changes), *made])})"
    else:
        unknown = f"{state} whose config.yaml is missing or unreadable, so its recipe is unknown"
        what = f"{unknown} ({made[0]})" if made else unknown
    return (
        f"{run_dir} holds {what}: to keep it, train under another ladder name (ladder=NAME, or "
        f"make ladder LADDER=NAME); to replace it, add overwrite=true (make ladder ARGS=overwrite=true; "
        f"the old folder is moved to {run_dir.name}.replaced-<time>/)"
    )


def set_aside(paths: RunPaths) -> None:
    """overwrite=true: renames a run of another recipe to <rung>.replaced-<time>/ (never deletes it), under its
    lock, so never from under a process still training there."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target, n = paths.root.with_name(f"{paths.root.name}.replaced-{stamp}"), 2
    while target.exists():
        target, n = paths.root.with_name(f"{paths.root.name}.replaced-{stamp}-{n}"), n + 1
    with run_lock(paths.root):
        paths.root.rename(target)
    log.warning("%s held another recipe (overwrite=true): the old run is now %s", paths.root, target)
