"""Picking up an interrupted rung: a readable last.ckpt, metrics.csv cut back to it, the same RNG streams."""

from __future__ import annotations

import csv
import random
from pathlib import Path

import numpy as np
import torch

from vitladder.atomic import atomic_path
from vitladder.data.device_batches import stream_seed
from vitladder.errors import CheckpointError
from vitladder.safe_load import load_checkpoint_file

RETRAIN = "delete it to retrain this rung from scratch"


def checkpoint_epoch(ckpt: Path) -> int:
    """Epochs finished when `ckpt` was written; a truncated or foreign file is a clear error."""
    state = load_checkpoint_file(ckpt, RETRAIN)
    try:
        return int(state["epoch"]) + 1  # Lightning stores the index of the epoch that just ended
    except (KeyError, TypeError, ValueError):
        raise CheckpointError(f"{ckpt}: not a Lightning checkpoint (no epoch); {RETRAIN}") from None


def _number(row: dict, key: str) -> float | None:
    try:
        return float(row.get(key) or "")
    except ValueError:
        return None


def prune_metrics(metrics_csv: Path, from_epoch: int) -> None:
    """Keeps what the checkpoint holds, so a resumed run logs each epoch once: the rows of epochs
    0..from_epoch (``epoch`` = epochs trained, 0 = initialisation) without the test, and the learning
    rates of the optimizer steps before them (rows with a ``step`` and no ``epoch``)."""
    if not metrics_csv.exists():
        return
    with metrics_csv.open(newline="") as file:
        reader = csv.DictReader(file)
        fields = reader.fieldnames or []
        # A run killed while Lightning appended a row leaves a partial line: keep whole rows only.
        rows = [row for row in reader if None not in row and None not in row.values()]
    tests = [key for key in fields if key.startswith("test/")]

    def held(row: dict) -> bool:
        epoch = _number(row, "epoch")
        return epoch is not None and epoch <= from_epoch and not any(row[key] for key in tests)

    # Lightning logs an epoch's metrics at the step of its last batch, the step of that batch's learning rate.
    last_step = max((step for row in rows if held(row) and (step := _number(row, "step")) is not None), default=-1)

    def step_held(row: dict) -> bool:
        step = _number(row, "step")
        return _number(row, "epoch") is None and step is not None and step <= last_step

    kept = [row for row in rows if held(row) or step_held(row)]
    with atomic_path(metrics_csv) as tmp, tmp.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=fields)
        writer.writeheader()
        writer.writerows(kept)


def last_logged(metrics_csv: Path, key: str) -> float:
    """The last value of `key` in metrics.csv (a resumed run whose epochs were all done logs none)."""
    with metrics_csv.open(newline="") as file:
        values = [row[key] for row in csv.DictReader(file) if row.get(key)]
    if not values:
        raise CheckpointError(f"{metrics_csv}: no {key} logged; delete the run folder to retrain this rung")
    return float(values[-1])


def seed_epoch(seed: int, rank: int, epoch: int) -> None:
    """Seeds the global RNG streams (MixUp/CutMix draws from numpy, drop path from torch, CPU and CUDA)
    from ``(seed, rank, epoch)``, at the start of every training epoch.

    Each rank draws its own MixUp/CutMix and drop-path samples, and an epoch's draws depend on nothing
    that happened before it, so a run resumed at an epoch boundary draws exactly what an uninterrupted
    one draws, with no RNG state saved in the checkpoint."""
    value = stream_seed(seed, rank, epoch, "global")
    torch.manual_seed(value)  # every device's generator too
    np.random.seed(value % 2**32)
    random.seed(value)
