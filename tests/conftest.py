"""Shared fixtures: the repository root, the real CIFAR-10 archive when present, configs for CPU-second runs,
offline W&B and reading offline W&B runs back as `wandb leet inspect --json` prints them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from tiny_data import tiny_data

REPO_ROOT = Path(__file__).resolve().parents[1]
CIFAR10_ARCHIVE = REPO_ROOT.parent / "shared" / "data" / "cifar10-jpeg.tar.xz"

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("WANDB_INIT_TIMEOUT", "1")  # a W&B server that does not answer costs a test 1 s, not 10 s
TINY_DATA = tiny_data(num_train=1200, num_test=200, val_size=200, batch_size=64)


@pytest.fixture
def matmul_precision():
    """Restores the process's float32 matmul precision after a test whose run takes CUDA's choices (TF32)."""
    import torch

    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    yield
    torch.set_float32_matmul_precision(previous)


@pytest.fixture
def tiny_cfg(tmp_path):
    """compose_rung for a CPU-second run: smoke width, tiny synthetic data, no progress bar."""
    from vitladder.config import compose_rung

    def make(rung: str, *overrides: str):
        return compose_rung(
            rung,
            ["profile=smoke", *TINY_DATA, f"output_root={tmp_path}", "trainer.enable_progress_bar=false", *overrides],
        )

    return make


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


@dataclass
class WandbRun:
    """One offline run folder's records, read back with `wandb leet inspect --json`."""

    folder: Path
    records: list[dict] = field(default_factory=list)

    def of(self, kind: str) -> list[dict]:
        return [r[kind] for r in self.records if r.get("type") == kind]

    @property
    def run(self) -> dict:
        return self.of("run")[0]

    @property
    def config(self) -> dict:
        """The run's config: wandb.init's, then every later update."""
        merged: dict = dict(self.run.get("config", {}).get("update", {}))
        for update in self.of("config"):
            merged.update(update.get("update", {}))
        return merged

    @property
    def history(self) -> list[dict]:
        return [h["item"] for h in self.of("history")]

    @property
    def summary(self) -> dict:
        merged: dict = {}
        for update in self.of("summary"):
            merged.update(update.get("update", {}))
        return merged

    @property
    def metrics(self) -> dict[str, dict]:
        """The final definition of every metric name or glob (a later definition replaces an earlier one)."""
        return {m.get("name") or m.get("glob_name"): m for m in self.of("metric")}

    @property
    def artifacts(self) -> list[dict]:
        return [a for a in self.of("artifact") if not a.get("name", "").startswith("run-")]  # not W&B's table ones

    def table(self, key: str) -> dict:
        """A logged wandb.Table's JSON (columns, data), from the run's media files."""
        return json.loads((self.folder / "files" / self.summary[f"{key}.path"]).read_text())


def read_wandb(folder: Path) -> WandbRun:
    wandb_cli = Path(sys.executable).with_name("wandb")
    result = subprocess.run(
        [str(wandb_cli), "leet", "inspect", "--json", str(folder)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return WandbRun(Path(folder), [json.loads(line) for line in result.stdout.splitlines() if line.strip()])


@pytest.fixture(scope="session")
def wandb_run_reader():
    """read_wandb(offline-run folder) -> WandbRun (test modules cannot import this conftest)."""
    return read_wandb


@pytest.fixture(scope="session")
def smoke_ladder(tmp_path_factory) -> Path:
    """A one-rung ladder (patch4, 2 epochs, lr logged every step) with its report built twice, W&B offline:
    shared by the tests that read W&B records back. Do not modify it: copy what a test changes."""
    from vitladder.config import compose_rung
    from vitladder.pipeline import train_rung
    from vitladder.report.ladder_report import build_report
    from vitladder.report.report_run import log_report_to_wandb

    root = tmp_path_factory.mktemp("wandb-ladder")
    cfg = compose_rung(
        "patch4",
        [
            "profile=smoke",
            *tiny_data(num_train=600, num_test=100, val_size=100, batch_size=100),
            "analysis.num_images=20",
            "analysis.track_images=8",
            "profile.epoch_scale=0.02",
            "trainer.log_every_n_steps=1",
            "trainer.enable_progress_bar=false",
            f"output_root={root}",
        ],
    )
    train_rung(cfg)
    ladder = Path(cfg.run_dir).parent
    for _ in range(2):  # rebuilt: the same report run continues
        build_report(ladder)
        log_report_to_wandb(ladder, mode="offline")
    return ladder
