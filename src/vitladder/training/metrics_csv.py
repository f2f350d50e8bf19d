"""metrics.csv: what Lightning logs, a row per call (``epoch`` = epochs trained; ``lr`` rows per logged optimizer
step, with a ``step`` and no ``epoch``), kept whole through a kill at any moment and cut back to last.ckpt when a
run resumes, so that every epoch is logged once."""

from __future__ import annotations

import csv
from contextlib import suppress
from pathlib import Path

import torch
from lightning.pytorch.loggers import Logger
from lightning.pytorch.utilities import rank_zero_only

from vitladder.atomic import atomic_path
from vitladder.run_folder import RunPaths


def read_rows(path: Path) -> tuple[list[str], list[dict]]:
    """(columns, rows), whole rows only: a kill while an older writer appended a row left a partial line."""
    with path.open(newline="") as file:
        reader = csv.DictReader(file)
        rows = [row for row in reader if None not in row and None not in row.values()]
        return list(reader.fieldnames or []), rows


def write_rows(path: Path, columns: list[str], rows: list[dict]) -> None:
    with atomic_path(path) as tmp, tmp.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


class MetricsLogger(Logger):
    """metrics.csv in CSVLogger's format (a column per key, sorted), saved at every row. Unlike CSVLogger it keeps
    the rows already there (a resumed run's, cut back by prune_metrics), and every save writes the whole file under a
    temporary name and renames it (CSVLogger rewrites it in place when a column appears, so a kill lost the rows)."""

    name, version = "metrics", ""

    def __init__(self, run_dir: Path) -> None:
        super().__init__()
        self.path = RunPaths(run_dir).metrics_csv
        self.columns: list[str] | None = None  # read at the first save, by the process that writes: rank 0
        self.rows: list[dict] = []
        self.unsaved: list[dict] = []

    @property
    def save_dir(self) -> str:  # trainer.log_dir, as with CSVLogger
        return str(self.path.parent)

    def log_hyperparams(self, params, *args, **kwargs) -> None:
        """Nothing: the run's config is config.yaml (and W&B's), not Lightning's hparams dump."""

    @rank_zero_only
    def log_metrics(self, metrics: dict, step: int | None = None) -> None:
        values = {key: value.item() if isinstance(value, torch.Tensor) else value for key, value in metrics.items()}
        self.unsaved.append({**values, "step": step})
        self.save()

    def save(self) -> None:  # Lightning also calls it (before a checkpoint, at the end): a failed save is retried
        if not self.unsaved:
            return
        if self.columns is None:
            self.columns, self.rows = read_rows(self.path) if self.path.exists() else ([], [])
        columns, rows = sorted(set(self.columns).union(*self.unsaved)), self.rows + self.unsaved
        write_rows(self.path, columns, rows)
        # Only once the file is in place: a failed save (a full disk) keeps the new rows for the next one.
        self.columns, self.rows, self.unsaved = columns, rows, []


def _number(row: dict, key: str) -> float | None:
    with suppress(ValueError):
        return float(row.get(key) or "")
    return None


def prune_metrics(metrics_csv: Path, from_epoch: int) -> None:
    """Keeps what the checkpoint holds: the rows of epochs 0..from_epoch without the test, and the learning rates
    of the optimizer steps before them."""
    if not metrics_csv.exists():
        return
    columns, rows = read_rows(metrics_csv)
    tests = [key for key in columns if key.startswith("test/")]

    def held(row: dict) -> bool:
        epoch = _number(row, "epoch")
        return epoch is not None and epoch <= from_epoch and not any(row[key] for key in tests)

    # Lightning logs an epoch's metrics at the step of its last batch, the step of that batch's learning rate.
    last_step = max((step for row in rows if held(row) and (step := _number(row, "step")) is not None), default=-1)

    def step_held(row: dict) -> bool:
        step = _number(row, "step")
        return _number(row, "epoch") is None and step is not None and step <= last_step

    write_rows(metrics_csv, columns, [row for row in rows if held(row) or step_held(row)])
