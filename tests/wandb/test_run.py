"""A rung's W&B run read back from its offline records: axes, summary, resumes, what `make wandb-sync` uploads; the
modes (auto: online only with credentials) and the logger over the run."""

from __future__ import annotations

import csv
import re
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pytest
from entry_points import load_script

from vitladder.analysis.metrics import declared
from vitladder.pipeline import train_rung
from vitladder.training import run as run_module
from vitladder.training.recipe import run_lock
from vitladder.wandb.run import make_logger, offline_runs, report_run_id, resolve_mode

REPO = Path(__file__).resolve().parents[2]


def rung_run(ladder: Path, wandb_run_reader, rung: str = "patch4"):
    folders = sorted((ladder / rung / "wandb").glob("offline-run-*"))
    assert len(folders) == 1, folders
    return wandb_run_reader(folders[0])


def every_offline_run(ladder: Path) -> list[Path]:
    return sorted(path for path in ladder.rglob("offline-run-*") if path.is_dir())


def test_epoch_level_metrics_against_epochs_trained_and_lr_per_step(smoke_ladder, wandb_run_reader) -> None:
    run = rung_run(smoke_ladder, wandb_run_reader)
    metrics = run.metrics
    assert "epoch" in metrics and "trainer/global_step" in metrics
    globs = {pattern: metric["step_metric"] for pattern, metric in metrics.items() if "*" in pattern}
    assert globs == {"*": "epoch"}, "no glob against Lightning's global step (W&B picks among globs in no order)"
    assert metrics["lr"]["step_metric"] == "trainer/global_step"

    history = run.history
    epochs = lambda key: [row["epoch"] for row in history if key in row]  # noqa: E731
    assert epochs("val/acc") == [1, 2] and epochs("train/loss") == [1, 2] and epochs("test/acc") == [2]
    assert epochs("track/layer1/distance_px") == [0, 1, 2]  # the point at initialisation too
    lr_steps = [row["trainer/global_step"] for row in history if "lr" in row]
    steps = (600 - 100) // 100 * 2  # training images left after validation, batch 100, 2 epochs
    assert lr_steps == list(range(steps)), "the learning rate of every optimizer step, once"
    assert all("epoch" not in row for row in history if "lr" in row)
    assert not [k for row in history for k in row if re.match(r"analysis/layer\d|lr-|.*/pg\d", k)]

    summary = run.summary
    assert 0 < summary["analysis/layer1_distance_px"] < 17 and "test/acc" in summary and "val/acc" in summary
    assert run.table("analysis/layers")["columns"][:4] == ["rung", "rung_index", "seed", "layer"]
    # The final analysis: in the history only as media (tables, charts' tables, figures), never a scalar.
    media = [key for row in history for key in row if key.startswith("analysis/")]
    assert media and all(
        f"{key.rsplit('.', 1)[0]}._type" in row for row in history for key in row if key.startswith("analysis/")
    ), "no one-point line panel"
    for quantity in (m.name for m in declared("wandb")):  # custom charts over the layers table
        assert run.config[f"_wandb.visualize.analysis/{quantity}_by_layer"]["panel_type"] == "Vega2"
        assert summary[f"analysis/{quantity}_by_layer_table._type"] == "table-file"

    rows = list(csv.DictReader((smoke_ladder / "patch4" / "metrics.csv").open()))
    assert sorted({float(r["epoch"]) for r in rows if r["val/acc"]}) == [1.0, 2.0]
    assert [int(r["step"]) for r in rows if r["lr"]] == list(range(steps)) and "lr-AdamW/pg1" not in rows[0]


class CrashInEpoch3(L.Callback):
    """Killed after two optimizer steps of the third epoch: the checkpoint holds 2 epochs, the logs more."""

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if trainer.current_epoch == 2 and batch_idx == 2:
            raise RuntimeError("simulated crash in epoch 3")


def test_a_killed_and_resumed_rung_logs_every_epoch_once_across_what_wandb_sync_uploads(
    tiny_cfg, monkeypatch, wandb_run_reader
) -> None:
    cfg = tiny_cfg("patch8", "profile.epoch_scale=0.03", "trainer.log_every_n_steps=1")  # 3 epochs
    build_trainer = run_module.build_trainer
    monkeypatch.setattr(
        run_module,
        "build_trainer",
        lambda cfg, loggers, callbacks: build_trainer(cfg, loggers, [*callbacks, CrashInEpoch3()]),
    )
    with pytest.raises(RuntimeError, match="simulated crash"):
        train_rung(cfg)
    monkeypatch.setattr(run_module, "build_trainer", build_trainer)
    train_rung(cfg)

    ladder = Path(cfg.run_dir).parent
    assert offline_runs(ladder) == every_offline_run(ladder)
    parts = [wandb_run_reader(folder) for folder in offline_runs(ladder)]  # what `make wandb-sync` uploads
    assert len(parts) == 2 and len({p.run["run_id"] for p in parts}) == 1, "one run, in two parts"
    rows = [row for part in parts for row in part.history]
    for key, expected in (
        ("val/acc", [1, 2, 3]),
        ("train/loss", [1, 2, 3]),
        ("track/layer1/distance_px", [0, 1, 2, 3]),
        ("test/acc", [3]),
    ):
        assert sorted(row["epoch"] for row in rows if key in row) == expected, key
    # The learning rate of every step; W&B keeps the two steps logged before the crash twice (same values).
    steps = sorted({row["trainer/global_step"] for row in rows if "lr" in row})
    assert steps == list(range(steps[-1] + 1)) and steps[-1] > 2
    csv_rows = list(csv.DictReader((ladder / "patch8" / "metrics.csv").open()))
    assert sorted(float(r["epoch"]) for r in csv_rows if r["val/acc"]) == [1.0, 2.0, 3.0]
    csv_steps = [int(r["step"]) for r in csv_rows if r["lr"]]
    assert sorted(csv_steps) == steps, "metrics.csv: each step's learning rate once"


def test_make_wandb_sync_uploads_every_run_of_a_ladder(smoke_ladder, wandb_run_reader, monkeypatch) -> None:
    """Rung runs and the report run's parts (the resumed parts of a rung: the test above)."""
    folders = offline_runs(smoke_ladder)
    assert folders == every_offline_run(smoke_ladder) and len(folders) == 3
    ids = [wandb_run_reader(folder).run["run_id"] for folder in folders]
    assert ids.count(report_run_id("vit-ladder", "smoke")) == 2 and len(set(ids)) == 2

    script = load_script("wandb_sync")
    commands = []
    monkeypatch.setattr(
        script.subprocess, "run", lambda command, check: commands.append(command) or SimpleNamespace(returncode=0)
    )
    assert script.main([str(smoke_ladder)]) == 0
    assert commands == [[sys.executable, "-m", "wandb", "sync", *map(str, folders)]]
    makefile = (REPO / "Makefile").read_text()
    (recipe,) = re.findall(r"^wandb-sync:.*\n\t(.*)$", makefile, flags=re.M)
    assert recipe == "$(PY) scripts/wandb_sync.py $(LADDER_DIR)"
    assert "make wandb-sync LADDER=<ladder>" in (REPO / "README.md").read_text()


def test_runs_set_aside_for_an_old_recipe_are_not_the_ladders(tmp_path) -> None:
    ladder = tmp_path / "smoke"
    kept = [
        ladder / "patch4" / "wandb" / "offline-run-20261201_010000-a",
        ladder / "patch4" / "wandb" / "offline-run-20261201_020000-a",  # the resumed part of the same run
        ladder / "patch4-seed1" / "wandb" / "offline-run-20261201_030000-b",
        ladder / "wandb" / "offline-run-20261201_040000-r",  # the report run
    ]
    replaced = ladder / "patch4.replaced-20261130-120000" / "wandb" / "offline-run-20261130_110000-z"
    for folder in (*kept, replaced):
        folder.mkdir(parents=True)
    (ladder / "patch8" / "wandb").mkdir(parents=True)
    (ladder / "patch8" / "wandb" / "offline-run-notes.txt").write_text("a file, not a run")
    assert offline_runs(ladder) == sorted(kept)


def test_wandb_sync_leaves_a_rung_in_use_for_the_next_upload(tmp_path, capsys, monkeypatch) -> None:
    """`wandb sync` never uploads a part again: a run still being written would lose its rest."""
    ladder = tmp_path / "smoke"
    in_use = ladder / "warmup" / "wandb" / "offline-run-20261201_010000-w"
    free = [
        ladder / "patch4" / "wandb" / "offline-run-20261201_000000-p",
        ladder / "wandb" / "offline-run-20261201_020000-r",
    ]
    for folder in (in_use, *free):
        folder.mkdir(parents=True)
    script, commands = load_script("wandb_sync"), []
    monkeypatch.setattr(
        script.subprocess, "run", lambda command, check: commands.append(command) or SimpleNamespace(returncode=0)
    )
    with run_lock(ladder / "warmup"):  # as train.py holds it while it trains the rung
        assert script.main([str(ladder)]) == 0
    assert commands == [[sys.executable, "-m", "wandb", "sync", *map(str, sorted(free))]]
    left = f"warning: {ladder / 'warmup'} is in use by another process: its W&B run is left for the next upload\n"
    assert capsys.readouterr().err == left
    assert script.main([str(ladder)]) == 0 and commands[-1][4:] == [str(run) for run in sorted([in_use, *free])]

    for folder in free:
        shutil.rmtree(folder)
    with run_lock(ladder / "warmup"), pytest.raises(SystemExit) as exit_info:
        script.main([str(ladder)])  # nothing else to upload, and no bare `wandb sync` (it would upload ./wandb)
    assert exit_info.value.code == 2 and "all in use by another process" in capsys.readouterr().err.splitlines()[-1]
    assert len(commands) == 2


@pytest.mark.parametrize(
    "make_ladder, message",
    [
        (lambda tmp_path: tmp_path / "none", "no such ladder folder (train one with `make ladder`)"),
        (lambda tmp_path: tmp_path, "no offline W&B run to upload"),
    ],
)
def test_wandb_sync_without_runs_says_so_in_one_line(tmp_path, capsys, make_ladder, message) -> None:
    with pytest.raises(SystemExit) as exit_info:
        load_script("wandb_sync").main([str(make_ladder(tmp_path))])
    lines = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(lines) == 1 and message in lines[0], lines


def test_auto_is_online_only_with_credentials_for_the_wandb_host(tmp_path: Path, fresh_wandb) -> None:
    """W&B's own login state (the netrc file `wandb login` writes, or WANDB_API_KEY), never a prompt."""
    import wandb

    fresh_wandb.delenv("WANDB_API_KEY", raising=False)
    fresh_wandb.setenv("WANDB_BASE_URL", "https://wandb.example.org")
    fresh_wandb.setenv("NETRC", str(tmp_path / "netrc"))
    netrcs = {
        "": "offline",
        "machine wandb.example.org\n  login user\n  password " + "k" * 40 + "\n": "online",
        "machine other.example.org login user password " + "k" * 40 + "\n": "offline",
    }
    for netrc, mode in netrcs.items():
        (tmp_path / "netrc").write_text(netrc)
        wandb.teardown()  # a new process: W&B keeps the credentials it found
        assert resolve_mode("auto") == mode, netrc
    fresh_wandb.setenv("WANDB_API_KEY", "k" * 40)
    assert resolve_mode("auto") == "online"
    assert resolve_mode("disabled") == "disabled" and resolve_mode("online") == "online"


def test_the_report_run_id_depends_on_project_and_ladder_only() -> None:
    assert report_run_id("vit-ladder", "full") == report_run_id("vit-ladder", "full")
    assert (
        len({report_run_id("vit-ladder", "full"), report_run_id("vit-ladder", "smoke"), report_run_id("other", "full")})
        == 3
    )


def test_no_private_wandb_module_is_imported() -> None:
    """W&B's private modules (wandb.sdk.*, wandb.apis.*, underscored ones) change without notice between
    the versions pyproject.toml accepts: the project uses the public API only."""
    import ast

    private = []
    for path in [*(REPO / "src").rglob("*.py"), *(REPO / "scripts").glob("*.py"), *REPO.glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else ([node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            )
            private += [
                (path.name, n)
                for n in names
                if n.split(".")[0] in ("wandb", "wandb_workspaces")
                and any(part.startswith("_") or part in ("sdk", "apis") for part in n.split(".")[1:])
            ]
    assert not private


def test_the_rung_logger_logs_into_the_run_the_project_started(tiny_cfg, tmp_path, monkeypatch) -> None:
    """make_logger starts the run (its mode, its fallback, its id in wandb_run_id.txt) and hands it to Lightning's
    WandbLogger, which then calls no wandb.init of its own (whose deprecated `anonymous` argument wandb warns
    about)."""
    import wandb

    logger = make_logger(tiny_cfg("patch8", "wandb.mode=offline"), tmp_path)
    try:
        assert logger.experiment is wandb.run and logger.save_dir == str(tmp_path)
        assert logger.experiment.id == (tmp_path / "wandb_run_id.txt").read_text().strip()
    finally:
        logger.experiment.finish()
    monkeypatch.delenv("WANDB_MODE")  # the tests' offline: it would win over the config
    assert make_logger(tiny_cfg("patch8", "wandb.mode=disabled"), tmp_path / "off") is None
    assert not (tmp_path / "off").exists(), "W&B disabled: no run, no id"
