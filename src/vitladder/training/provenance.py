"""What made a run, kept in its folder (provenance.json, written with config.yaml): the versions of the project
and of the libraries that decide its numbers, and every config key's default at the time, so that a later
version can tell a setting it no longer has from a changed one (training/recipe.py)."""

from __future__ import annotations

import functools
import inspect
import json
import platform
import subprocess
from importlib import metadata
from typing import Any

from omegaconf import DictConfig

from vitladder.atomic import write_json
from vitladder.config import CONF_DIR, base_values, flatten
from vitladder.run_folder import RunPaths

LIBRARIES = ("torch", "lightning", "timm", "hydra-core", "wandb")
SUPPLIED_BY_THE_RUN = ("logger", "callbacks", "plugins")  # Trainer arguments the config does not hold


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(CONF_DIR.parent), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_commit() -> str | None:
    """The project's commit (``-dirty`` when tracked files differ from it); None outside a git checkout of it."""
    top = _git("rev-parse", "--show-toplevel")
    if top is None or not CONF_DIR.parent.samefile(top):  # another repository around an installed copy
        return None
    return _git("describe", "--always", "--dirty", "--abbrev=12", "--exclude=*")


@functools.cache
def versions() -> dict[str, str | None]:
    """The project's version and commit, Python's and the libraries' versions, for this process."""
    return {
        "vitladder": _version("vitladder"),
        "git_commit": git_commit(),
        "python": platform.python_version(),
        **{name: _version(name) for name in LIBRARIES},
    }


@functools.cache
def trainer_defaults() -> dict[str, Any]:
    """trainer.<argument>: Lightning's own default, from the installed Trainer's signature."""
    import lightning as L

    parameters = inspect.signature(L.Trainer).parameters.items()
    return {f"trainer.{name}": p.default for name, p in parameters if name not in SUPPLIED_BY_THE_RUN}


def key_defaults(cfg: DictConfig) -> dict[str, Any]:
    """Every key's default, as dotted keys: its value in conf/ before any rung or command line (the schema's
    default where conf/ gives none), for the run's data source; Lightning's own for trainer.*."""
    return {**flatten(base_values(str(cfg.data.source))), **trainer_defaults()}


def write_provenance(paths: RunPaths, cfg: DictConfig) -> None:
    write_json(paths.provenance, {"versions": versions(), "defaults": key_defaults(cfg)})


def read_provenance(paths: RunPaths) -> dict:
    """The folder's record ({"versions": ..., "defaults": ...}); {} when it has none (written before it existed)
    or an unreadable one."""
    try:
        record = json.loads(paths.provenance.read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}
