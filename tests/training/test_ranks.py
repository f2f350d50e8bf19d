"""`make ladder` on several devices (DDP over gloo processes on the CPU): every rank trains the same rungs in the
same order, only rank 0 writes in the ladder's folder and does the ladder's duties (estimate, report, demo, W&B
report run), and a rung killed on every rank resumes. Rank 0 is slow to write each done.json, as a W&B upload at
the end of a rung makes it, so the other ranks run ahead of it. To keep it short the ladder's first rungs are
finished before it starts (skipped on every rank), and it trains the last three."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from tiny_data import tiny_data

from vitladder.training.checkpoint_io import checkpoint_epoch
from vitladder.training.ladder import PlannedRun, plan_ladder
from vitladder.training.run import started_for_another_rank

# Imported by every Python process of the ladder (rank 0 and the ranks Lightning starts) through PYTHONPATH. It
# records each process's rank and every write, removal, rename or folder creation under RANKS_TEST_ROOT (Python's
# audit events), delays rank 0's done.json, and with RANKS_TEST_KILL=<path> kills every rank (the process group)
# as rank 0 is about to replace that file a second time, so the first version of it is complete.
SITECUSTOMIZE = textwrap.dedent(
    """
    import json, os, signal, sys, time

    ROOT, LOG = os.environ.get("RANKS_TEST_ROOT"), os.environ.get("RANKS_TEST_LOG")
    RANK = os.environ.get("LOCAL_RANK", "0")  # Lightning's launcher sets it for the ranks it starts
    DELAY, KILL = float(os.environ.get("RANKS_TEST_DELAY", "0")), os.environ.get("RANKS_TEST_KILL")
    WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    CHANGES = {"os.remove", "os.rename", "os.mkdir", "os.rmdir", "shutil.rmtree", "os.truncate", "os.chmod"}

    def record(**entry):
        with open(f"{LOG}/{os.getpid()}.jsonl", "a") as file:
            file.write(json.dumps({"pid": os.getpid(), "rank": RANK, **entry}) + "\\n")

    def hook(event, args):
        if event == "open":
            path, mode, flags = args
            writes = any(c in (mode or "") for c in "wax+") or bool((flags or 0) & WRITE_FLAGS)
        elif event in CHANGES:
            path, writes = args[1] if event == "os.rename" else args[0], True
        else:
            return
        if not (writes and isinstance(path, (str, os.PathLike)) and os.fspath(path).startswith(ROOT)):
            return
        path = os.fspath(path)
        record(event=event, path=os.path.relpath(path, ROOT))
        if RANK == "0" and event == "os.rename" and os.path.basename(path) == "done.json":
            time.sleep(DELAY)
        if RANK == "0" and event == "os.rename" and path == KILL and os.path.exists(path):
            os.killpg(os.getpgrp(), signal.SIGKILL)

    if ROOT and LOG:
        record(event="start", argv=sys.argv)
        sys.addaudithook(hook)

    if RANK == os.environ.get("RANKS_TEST_NAN_RANK"):  # this rank's loss turns NaN in that epoch
        from vitladder.training.module import RecipeModule

        step, nan_epoch = RecipeModule.training_step, int(os.environ["RANKS_TEST_NAN_EPOCH"])
        def diverging_step(self, batch, batch_idx):
            loss = step(self, batch, batch_idx)
            return loss * float("nan") if self.current_epoch == nan_epoch else loss
        RecipeModule.training_step = diverging_step
    """
)

# The smoke ladder at tiny sizes: 96 training images in 4 steps of 24 (12 or 8 per rank, even for MixUp/CutMix),
# 48 test images (24 or 16 per rank); 1 epoch per rung, 2 for epochs200.
NUM_TRAIN, VAL, BATCH = 120, 24, 24
STEPS_PER_EPOCH = (NUM_TRAIN - VAL) // BATCH
LADDER = [
    "profile=smoke",
    *tiny_data(num_train=NUM_TRAIN, num_test=48, val_size=VAL, batch_size=BATCH),
    "analysis.num_images=8",
    "analysis.track_every_n_epochs=0",
    "checkpoint.every_n_epochs=1",
    "trainer.enable_progress_bar=false",
    "trainer.accelerator=cpu",
    "trainer.strategy=ddp",
]
TRAINED = 2  # the ladder's last rungs (stochastic_depth: MixUp/CutMix and drop path; epochs200: 2 epochs) train;
# the ones below are finished before it starts (their recipe's config.yaml and a done.json) and skipped


def finish(run: PlannedRun) -> None:
    """A run folder as a finished train_rung leaves it, as far as the ladder and the report read it."""
    run.run_dir.mkdir(parents=True)
    (run.run_dir / "config.yaml").write_text(OmegaConf.to_yaml(run.cfg, resolve=True))
    summary = {"rung": run.rung, "ladder": run.cfg.ladder, "seed": 0, "epochs": 1, "steps": 4, "seconds": 1.0}
    (run.run_dir / "done.json").write_text(json.dumps({**summary, "test_acc": 0.1, "test_loss": 2.3, "val_acc": 0.1}))


class RankedLadder:
    """`python scripts/ladder.py` (what `make ladder` runs) on ``devices`` gloo processes under SITECUSTOMIZE,
    in its own process group, over a ladder whose rungs below the last TRAINED are finished."""

    def __init__(self, repo_root: Path, tmp_path: Path, env: dict, devices: int) -> None:
        site, self.logs, out = tmp_path / "site", tmp_path / "logs", tmp_path / "out"
        for folder in (site, self.logs, out):
            folder.mkdir()
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
        self.repo_root, self.devices, self.folder = repo_root, devices, out / "smoke"
        self.overrides = [*LADDER, f"trainer.devices={devices}", f"output_root={out}"]
        self.runs = plan_ladder([0], self.overrides)
        for run in self.runs[:-TRAINED]:
            finish(run)
        self.env = {
            **env,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(site), str(repo_root / "src"), env.get("PYTHONPATH")])),
            "RANKS_TEST_ROOT": str(out),
            "RANKS_TEST_LOG": str(self.logs),
            "RANKS_TEST_DELAY": "3",  # seconds before each done.json of rank 0
        }
        self.env.pop("LOCAL_RANK", None)  # rank 0 of a fresh run

    def run(self, **extra_env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "scripts/ladder.py", *self.overrides],
            cwd=self.repo_root,
            env={**self.env, **extra_env},
            capture_output=True,
            text=True,
            timeout=900,
            start_new_session=True,  # its own process group: a kill reaches every rank and nothing else
        )

    def records(self) -> dict[str, list[dict]]:
        """Every process's records, by rank: 'start' records, then what it changed under the output root."""
        by_rank: dict[str, list[dict]] = {}
        for log in self.logs.glob("*.jsonl"):
            for line in log.read_text().splitlines():
                entry = json.loads(line)
                by_rank.setdefault(entry["rank"], []).append(entry)
        return by_rank

    def check_finished(self, result: subprocess.CompletedProcess, attempts: int, wandb_run_reader) -> None:
        """Every rung finished, trained rungs in full, one report, demo and W&B report run; every rank ran in
        each attempt, and only rank 0 changed anything under the output root."""
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
        assert "error" not in result.stderr.lower(), result.stderr[-5000:]
        assert result.stdout.count("browser demo:") == 1 and result.stdout.count("report in") == 1
        for run in self.runs[-TRAINED:]:
            summary = json.loads((run.run_dir / "done.json").read_text())
            epochs = 2 if run.rung == "epochs200" else 1
            assert summary["epochs"] == epochs and summary["steps"] == epochs * STEPS_PER_EPOCH, summary
            assert "layer1_distance_px" in summary, "analysed"
        with (self.folder / "ladder.csv").open(newline="") as file:  # beside report.md, from the same rows
            assert [row["rung"] for row in csv.DictReader(file) if row["test_acc"]] == [run.rung for run in self.runs]
        assert (self.folder / "report.md").is_file() and (self.folder / "epochs200" / "demo" / "index.html").is_file()
        (report_run,) = (self.folder / "wandb").glob("offline-run-*")
        assert wandb_run_reader(report_run).run["job_type"] == "report"

        by_rank = self.records()
        assert sorted(by_rank) == [str(rank) for rank in range(self.devices)]
        for rank, records in by_rank.items():
            assert len({r["pid"] for r in records if r["event"] == "start"}) == attempts, f"rank {rank} ran"
            if rank != "0":
                assert [r for r in records if r["event"] != "start"] == [], f"rank {rank} changed files"
        written = {r["path"] for r in by_rank["0"] if r["event"] != "start"}
        trained = [run.rung for run in self.runs[-TRAINED:]]
        assert {f"smoke/{rung}/{name}" for rung in trained for name in ("config.yaml", "done.json")} <= written


@pytest.mark.slow
def test_make_ladder_on_3_ranks_finishes_with_rank_0_doing_the_ladders_duties(
    repo_root, tmp_path, child_env, wandb_run_reader
):
    ladder = RankedLadder(repo_root, tmp_path, child_env(), devices=3)
    result = ladder.run()
    ladder.check_finished(result, attempts=1, wandb_run_reader=wandb_run_reader)
    runs = ladder.runs
    # The ladder's own lines once: the other ranks neither estimate nor log.
    assert result.stdout.count(f"{len(runs) - TRAINED} of {len(runs)} runs already finished") == 1
    assert result.stdout.count(f"estimated time for {TRAINED} runs") == 1
    assert result.stdout.count(f"[{TRAINED}/{TRAINED}] epochs200: test acc") == 1


@pytest.mark.slow
def test_make_ladder_on_2_ranks_killed_in_a_rung_resumes_it(repo_root, tmp_path, child_env, wandb_run_reader):
    ladder = RankedLadder(repo_root, tmp_path, child_env(), devices=2)
    last_ckpt = ladder.folder / "epochs200" / "checkpoints" / "last.ckpt"
    killed = ladder.run(RANKS_TEST_KILL=str(last_ckpt))  # on every rank, after epochs200's first checkpoint
    assert killed.returncode == -9, killed.stdout[-3000:] + killed.stderr[-5000:]
    assert [run.rung for run in ladder.runs if not (run.run_dir / "done.json").exists()] == ["epochs200"]
    assert last_ckpt.exists()

    # Resumed, and rank 1's loss turns NaN in the second epoch: every rank stops there (the loss is averaged over
    # the ranks), with one line and exit code 2, and the first epoch's checkpoint is kept.
    diverged = ladder.run(RANKS_TEST_NAN_RANK="1", RANKS_TEST_NAN_EPOCH="1")
    assert diverged.returncode == 2, diverged.stdout[-3000:] + diverged.stderr[-5000:]
    errors = [line for line in diverged.stderr.splitlines() if "error" in line.lower()]
    assert errors == [
        "error: training loss became nan in epoch 1: lower optim.lr or add warmup; the last good checkpoint is kept"
    ], diverged.stderr[-5000:]
    assert checkpoint_epoch(last_ckpt) == 1 and not (ladder.folder / "epochs200" / "done.json").exists()

    result = ladder.run()
    ladder.check_finished(result, attempts=3, wandb_run_reader=wandb_run_reader)
    assert result.stdout.count(f"{len(ladder.runs) - 1} of {len(ladder.runs)} runs already finished") == 1
    with (ladder.folder / "epochs200" / "metrics.csv").open(newline="") as file:
        validated = [float(row["epoch"]) for row in csv.DictReader(file) if row["val/acc"]]
    assert validated == [1.0, 2.0], "each epoch once: the resumed rung kept epoch 1 and trained epoch 2"
    assert not list(ladder.folder.rglob(".*.tmp")), "the killed write's temporary file is removed"


@pytest.mark.slow
def test_train_py_on_2_ranks_says_its_result_once_and_only_rank_0_writes(repo_root, tmp_path, child_env):
    ladder = RankedLadder(repo_root, tmp_path, child_env(), devices=2)
    result = subprocess.run(
        [sys.executable, "train.py", "step=epochs200", *ladder.overrides, "analysis.track_every_n_epochs=1"],
        cwd=repo_root, env={**ladder.env, "RANKS_TEST_DELAY": "0"}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert result.stdout.count("epochs200: test accuracy") == 1, result.stdout[-3000:]
    # Rank 0 alone logs the epoch axis and the tracking: Lightning's advice to sync them across ranks is dropped.
    assert "sync_dist=True" not in result.stderr, result.stderr[-5000:]
    assert "track/layer0/distance_px" in (ladder.folder / "epochs200" / "metrics.csv").read_text()
    by_rank = ladder.records()
    assert sorted(by_rank) == ["0", "1"] and [r for r in by_rank["1"] if r["event"] != "start"] == []


def test_the_launchers_rank_variables_name_another_rank(monkeypatch):
    for name in ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert not started_for_another_rank()
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("NODE_RANK", "0")
    assert not started_for_another_rank(), "Lightning sets LOCAL_RANK=0 and NODE_RANK=0 in rank 0 itself"
    for name in ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID"):
        monkeypatch.setenv(name, "1")
        assert started_for_another_rank(), name
        monkeypatch.setenv(name, "0")
