"""Shared fixtures: the repository root, the real CIFAR-10 archive when present, offline W&B."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
CIFAR10_ARCHIVE = REPO_ROOT.parent / "shared" / "data" / "cifar10-jpeg.tar.xz"

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def cifar10_archive() -> Path:
    if not CIFAR10_ARCHIVE.exists():
        pytest.skip(f"real CIFAR-10 archive not found at {CIFAR10_ARCHIVE}")
    return CIFAR10_ARCHIVE


@pytest.fixture(scope="session")
def cifar10_cache_dir() -> Path:
    """``<repo>/data/cache`` (or ``$VITLADDER_DATA_CACHE``): the cache the training runs use too
    (conf/data/imagefolder.yaml), so the archive is decoded once per machine, not once per session."""
    return Path(os.environ.get("VITLADDER_DATA_CACHE", REPO_ROOT / "data" / "cache"))


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment for a child `train.py`/`ladder.py`: offline W&B, and not this test process's W&B
    service (an in-process run exports WANDB_SERVICE; a child killed mid-run would leave its stream there)."""
    env = {key: value for key, value in os.environ.items() if key != "WANDB_SERVICE"}
    env.update({"WANDB_MODE": "offline", **extra})
    return {key: value for key, value in env.items() if value}


@pytest.fixture(scope="session")
def child_env():
    return subprocess_env


class _Payload:
    """Unpickled, it creates `marker`: what a hostile checkpoint could do with any other code."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


def write_payload_checkpoint(path: Path, marker: Path, base: dict | None = None) -> Path:
    """A torch file shaped like a checkpoint of this project (``base``) that runs code if unpickled."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({**(base or {}), "payload": _Payload(marker)}, path)
    return path


@pytest.fixture(scope="session")
def payload_checkpoint():
    """``payload_checkpoint(path, marker, base=None)``: writes a checkpoint whose unpickling creates ``marker``."""
    return write_payload_checkpoint
