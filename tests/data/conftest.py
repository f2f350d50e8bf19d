"""Fixtures for the real CIFAR-10 JPEG archive (``cifar10_archive`` comes from tests/conftest.py
and skips cleanly where the archive is absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vitladder.data.sources import ImageSplits
from vitladder.data.sources.imagefolder import load_image_folder


@pytest.fixture(scope="session")
def cifar10_jpeg(cifar10_archive: Path, cifar10_cache_dir: Path) -> ImageSplits:
    """The real archive's 50,000 train / 10,000 test images: ~15-20 s the first time, then ~0.3 s."""
    return load_image_folder(cifar10_archive, cifar10_cache_dir)
