"""A rung's W&B run read back from its offline records: axes, names, summary, artifacts, resumes, re-analysis."""

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
from extensions import add_stripes_source

from vitladder.analysis.metrics import declared
from vitladder.data.sources import describe
from vitladder.pipeline import train_rung
from vitladder.training import run as run_module
from vitladder.training.wandb_artifacts import dataset_artifact, declare_inputs, log_rung_artifacts
from vitladder.training.wandb_run import logged_in, offline_runs, report_run_id

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
    for pattern in ("*", "train/*", "val/*", "test/*", "track/*"):
        assert metrics[pattern]["step_metric"] == "epoch", pattern  # Lightning's `*` -> global step is replaced
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


def test_model_and_analysis_artifacts_with_rung_aliases(smoke_ladder, wandb_run_reader) -> None:
    artifacts = {a["name"]: a for a in rung_run(smoke_ladder, wandb_run_reader).artifacts}
    model, analysis = artifacts["model-smoke-patch4-seed0"], artifacts["analysis-smoke-patch4-seed0"]
    assert model["type"] == "model" and set(model["aliases"]) == {"latest", "patch4"}
    assert [e["path"] for e in model["manifest"]["contents"]] == ["model.safetensors"]
    assert analysis["type"] == "analysis" and set(analysis["aliases"]) == {"latest", "patch4"}
    assert {"heads.csv", "layers.csv", "tracking.csv", "locality.png"} <= {
        e["path"] for e in analysis["manifest"]["contents"]
    }
    assert not [a for a in artifacts.values() if a["type"] == "dataset"], "an offline run cannot declare inputs"


def test_the_dataset_is_what_its_source_loaded_whatever_the_source(tmp_path: Path, monkeypatch) -> None:
    """A source added as one file gets the same record as the shipped ones: its name, its own keys' values
    and the digest of its arrays; the digest, and so W&B's version, follows the images, not the batch size."""
    import json

    from omegaconf import OmegaConf

    from vitladder.data import sources

    monkeypatch.setattr(sources, "_loaded", {})
    add_stripes_source(tmp_path, monkeypatch)
    stripes = OmegaConf.create({"source": "stripes", "num_images": 40, "scratch_dir": "x", "batch_size": 5})
    record = describe(stripes)
    art = dataset_artifact(record)
    assert (art.name, art.type) == ("dataset-stripes", "dataset") and art.metadata == record
    assert record == {
        "source": "stripes",
        "config": {"num_images": 40, "scratch_dir": "x"},
        "sha256": sources.load(stripes).digest,
        "train_images": 30,
        "test_images": 10,
        "image_size": 16,
        "classes": ["even", "odd"],
    }
    (entry,) = art.manifest.entries.values()
    assert entry.path == "dataset.json" and not entry.ref  # a small file of its own, no reference to a path
    identity = {key: value for key, value in record.items() if key != "config"}
    assert json.loads(Path(entry.local_path).read_text()) == identity

    rebatched = dataset_artifact(describe(OmegaConf.merge(stripes, {"batch_size": 8})))
    more = describe(OmegaConf.merge(stripes, {"num_images": 50}))
    assert rebatched.digest == art.digest and more["sha256"] != record["sha256"]
    assert dataset_artifact(more).digest != art.digest
    synthetic = describe(OmegaConf.create({"source": "synthetic", "num_train": 60, "num_test": 20}))
    assert synthetic["config"] == {"num_train": 60, "num_test": 20} and synthetic["classes"][0] == "grating_0deg_2cyc"
    assert dataset_artifact(synthetic).name == "dataset-synthetic"


def test_inputs_are_declared_where_wandb_can(tmp_path: Path) -> None:
    from omegaconf import OmegaConf

    class FakeConfig(dict):
        def update(self, values, allow_val_change=False):
            super().update(values)

    class FakeRun:  # records what an online run is asked to do
        def __init__(self, offline: bool):
            self.offline, self.used, self.logged, self.config = offline, [], [], FakeConfig()

        def use_artifact(self, artifact):
            self.used.append(artifact)

        def log_artifact(self, artifact, aliases):
            self.logged.append((artifact.name, artifact.type, aliases))

    (tmp_path / "model.safetensors").write_bytes(b"weights")
    cfg = OmegaConf.create(
        {"ladder": "full", "rung": "warmup", "seed": 2, "data": {"source": "synthetic", "num_train": 10, "num_test": 5}}
    )
    online = FakeRun(offline=False)
    log_rung_artifacts(online, cfg, tmp_path / "model.safetensors", tmp_path / "no-analysis", {"test_acc": 0.5})
    assert [(a.name, a.type) for a in online.used] == [("dataset-synthetic", "dataset")]
    assert online.logged == [("model-full-warmup-seed2", "model", ["latest", "warmup"])]
    assert online.config["inputs"] == [
        {"name": "dataset-synthetic", "type": "dataset", "digest": online.used[0].digest}
    ]
    offline = FakeRun(offline=True)
    assert declare_inputs(offline, online.used) is False and offline.used == []
    assert offline.config["inputs"] == online.config["inputs"], "offline, the config is the record"


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
        lambda cfg, paths, loggers, callbacks: build_trainer(cfg, paths, loggers, [*callbacks, CrashInEpoch3()]),
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


def test_analyze_updates_the_rungs_wandb_run(smoke_ladder, tmp_path: Path, wandb_run_reader, capsys) -> None:
    run_dir = tmp_path / "patch4"
    shutil.copytree(smoke_ladder / "patch4", run_dir)
    run_id = (run_dir / "wandb_run_id.txt").read_text().strip()
    load_script("analyze").main([str(run_dir), "--images", "10", "--batch-size", "5", "--device", "cpu"])
    assert f"W&B run {run_id}" in capsys.readouterr().out

    folders = sorted((run_dir / "wandb").glob(f"offline-run-*-{run_id}"))
    assert len(folders) == 2, "the re-analysis continues the rung's run"
    update = wandb_run_reader(folders[-1])
    assert update.summary["analysis/images"] == 10
    (artifact,) = update.artifacts
    assert artifact["name"] == "analysis-smoke-patch4-seed0" and artifact["type"] == "analysis"
    layers = update.table("analysis/layers")
    with (run_dir / "analysis" / "layers.csv").open() as file:
        assert [float(r["distance_px"]) for r in csv.DictReader(file)] == [row[4] for row in layers["data"]]


def test_login_state_from_the_netrc_file(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.example.org")
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    assert not logged_in()
    (tmp_path / "netrc").write_text("machine wandb.example.org\n  login user\n  password " + "k" * 40 + "\n")
    assert logged_in()
    (tmp_path / "netrc").write_text("machine other.example.org login user password secret\n")
    assert not logged_in()


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


def test_the_rung_logger_does_not_pass_wandbs_deprecated_anonymous_setting(tiny_cfg, tmp_path) -> None:
    """Lightning's WandbLogger passes anonymous=None, which wandb warns about; make_logger drops it from the
    private dict the logger hands to wandb.init. Pinned both ways, so a Lightning that stops passing it (or
    renames the dict) shows here."""
    from lightning.pytorch.loggers import WandbLogger

    from vitladder.training.wandb_run import make_logger

    assert WandbLogger(project="p", mode="offline")._wandb_init["anonymous"] is None
    logger = make_logger(tiny_cfg("patch8", "wandb.mode=offline"), tmp_path)
    assert "anonymous" not in logger._wandb_init
    assert logger._wandb_init["id"] == (tmp_path / "wandb_run_id.txt").read_text().strip()
