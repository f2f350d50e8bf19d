"""metrics.csv keeps every finished row: through a resume, a kill while a new column is saved, a full disk."""

from __future__ import annotations

import csv
import errno
from pathlib import Path

import pytest

from vitladder.run_folder import RunPaths
from vitladder.training.metrics_csv import MetricsLogger
from vitladder.training.run import resume_checkpoint


class Killed(BaseException):
    """The process dying in the middle of a write (nothing after it runs, as with SIGKILL)."""


def rows_of(path: Path) -> list[dict]:
    with path.open(newline="") as file:
        return list(csv.DictReader(file))


def log_first_epoch(logger: MetricsLogger) -> None:
    logger.log_metrics({"lr": 0.1}, step=0)
    logger.log_metrics({"val/acc": 0.25, "val/loss": 2.1, "epoch": 1}, step=3)


def test_rows_are_saved_as_they_are_logged_under_the_union_of_their_columns(tmp_path):
    logger = MetricsLogger(tmp_path)
    log_first_epoch(logger)
    rows = rows_of(tmp_path / "metrics.csv")
    assert [row["step"] for row in rows] == ["0", "3"]
    assert list(rows[0]) == ["epoch", "lr", "step", "val/acc", "val/loss"]
    assert rows[0]["lr"] == "0.1" and rows[0]["val/acc"] == "" and rows[1]["val/acc"] == "0.25"


def test_a_kill_while_a_new_column_is_saved_keeps_every_finished_row(tmp_path, monkeypatch):
    logger = MetricsLogger(tmp_path)
    log_first_epoch(logger)
    before = (tmp_path / "metrics.csv").read_text()

    def dies_while_writing(self, rows):
        raise Killed

    # train/loss is a new column: Lightning's own writer truncates metrics.csv here to rewrite its header.
    monkeypatch.setattr(csv.DictWriter, "writerows", dies_while_writing)
    with pytest.raises(Killed):
        logger.log_metrics({"train/loss": 1.9, "epoch": 1}, step=3)
    assert (tmp_path / "metrics.csv").read_text() == before


def test_a_resumed_logger_keeps_the_rows_already_there_and_adds_its_own(tmp_path):
    log_first_epoch(MetricsLogger(tmp_path))
    resumed = MetricsLogger(tmp_path)  # Lightning's CSVLogger deletes an existing metrics.csv here
    resumed.log_metrics({"train/loss": 1.8, "epoch": 2}, step=7)
    rows = rows_of(tmp_path / "metrics.csv")
    assert [(row["step"], row["epoch"]) for row in rows] == [("0", ""), ("3", "1"), ("7", "2")]
    assert rows[1]["val/acc"] == "0.25" and rows[2]["train/loss"] == "1.8" and rows[2]["val/acc"] == ""


def test_rows_a_full_disk_kept_from_the_file_are_saved_once_with_the_next_row(tmp_path, monkeypatch):
    logger = MetricsLogger(tmp_path)
    log_first_epoch(logger)
    real_writerows = csv.DictWriter.writerows

    def disk_full(self, rows):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(csv.DictWriter, "writerows", disk_full)
    with pytest.raises(OSError):
        logger.log_metrics({"lr": 0.2}, step=5)
    monkeypatch.setattr(csv.DictWriter, "writerows", real_writerows)
    logger.log_metrics({"lr": 0.3}, step=6)
    assert [row["step"] for row in rows_of(tmp_path / "metrics.csv")] == ["0", "3", "5", "6"]


def test_a_fresh_start_drops_the_rows_of_an_attempt_killed_before_its_first_checkpoint(tmp_path):
    paths = RunPaths(tmp_path)
    log_first_epoch(MetricsLogger(tmp_path))  # then killed before last.ckpt existed
    assert resume_checkpoint(paths) is None
    assert not paths.metrics_csv.exists()
