"""Picking up an interrupted rung: a readable last.ckpt, metrics.csv cut back to it, the same RNG streams."""

from __future__ import annotations

import csv
import random
from pathlib import Path

import numpy as np
import torch

from vitladder.atomic import atomic_path
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


def prune_metrics(metrics_csv: Path, from_epoch: int) -> None:
    """Drops rows of epochs the checkpoint does not hold, so a resumed run logs each epoch once."""
    if not metrics_csv.exists():
        return
    with metrics_csv.open(newline="") as file:
        reader = csv.DictReader(file)
        fields = reader.fieldnames or []
        # A run killed while Lightning appended a row leaves a partial line: keep whole rows only.
        rows = [row for row in reader if (row.get("epoch") or "").isdigit() and int(row["epoch"]) < from_epoch]
    with atomic_path(metrics_csv) as tmp, tmp.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def last_logged(metrics_csv: Path, key: str) -> float:
    """The last value of `key` in metrics.csv (a resumed run whose epochs were all done logs none)."""
    with metrics_csv.open(newline="") as file:
        values = [row[key] for row in csv.DictReader(file) if row.get(key)]
    if not values:
        raise CheckpointError(f"{metrics_csv}: no {key} logged; delete the run folder to retrain this rung")
    return float(values[-1])


def rng_state() -> dict:
    """Global RNG streams (MixUp/CutMix draws from numpy, drop path from torch) for the checkpoint,
    as tensors and numbers only, so the checkpoint still loads with `weights_only=True`."""
    _, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {"keys": torch.from_numpy(keys.astype(np.int64)), "position": int(position),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached_gaussian)},
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    numpy_state = state["numpy"]
    np.random.set_state((
        "MT19937", numpy_state["keys"].numpy().astype(np.uint32), numpy_state["position"],
        numpy_state["has_gauss"], numpy_state["cached_gaussian"],
    ))
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
