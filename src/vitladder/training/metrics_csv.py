"""metrics.csv: Lightning's CSVLogger, written so that a run killed at any moment keeps its finished epochs."""

from __future__ import annotations

import csv
from pathlib import Path

from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter

from vitladder.atomic import atomic_path


class MetricsWriter(ExperimentWriter):
    """Lightning's CSV writer with two changes for a run folder.

    - It starts from the rows already in metrics.csv (a resumed run's finished epochs, cut back to its
      checkpoint by ``resume.prune_metrics``); Lightning deletes the file.
    - Every save writes the whole file under a temporary name and renames it. Lightning rewrites the file in
      place whenever a column appears (the first validation, the first epoch's end, just after last.ckpt is
      saved), so a kill at that moment left a file without the epochs before it.
    """

    def __init__(self, log_dir: str) -> None:
        super().__init__(log_dir)
        self.rows: list[dict] = []  # everything metrics.csv holds, in the order logged
        path = Path(self.metrics_file_path)
        if path.exists():
            with path.open(newline="") as file:
                reader = csv.DictReader(file)
                self.rows = list(reader)
                self.metrics_keys = sorted(reader.fieldnames or [])

    def _check_log_dir_exists(self) -> None:
        """Lightning warns and deletes metrics.csv here; a run folder's file is read in ``__init__``. A private
        hook, as no public one keeps the file: test_metrics_csv.py's resumed-logger test pins it."""

    def save(self) -> None:
        if not self.metrics:
            return
        keys = sorted(set(self.metrics_keys).union(*self.metrics))
        rows = self.rows + self.metrics
        with atomic_path(self.metrics_file_path) as tmp, tmp.open("w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=keys)
            writer.writeheader()
            writer.writerows(rows)
        # Only once the file is in place: a failed save (a full disk) keeps the new rows for the next one.
        self.metrics_keys, self.rows, self.metrics = keys, rows, []


class MetricsLogger(CSVLogger):
    """metrics.csv in ``run_dir``: rows per epoch (``epoch`` = epochs trained) and ``lr`` rows per logged
    optimizer step, saved as they are logged; a resumed run keeps the rows its checkpoint holds."""

    def __init__(self, run_dir: Path) -> None:
        super().__init__(save_dir=str(run_dir), name="", version="", flush_logs_every_n_steps=1)

    @property
    @rank_zero_experiment
    def experiment(self) -> MetricsWriter:
        if self._experiment is None:
            self._experiment = MetricsWriter(self.log_dir)
        return self._experiment
