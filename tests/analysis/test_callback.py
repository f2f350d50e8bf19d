"""AttentionAnalysis inside a real (tiny) Lightning fit: files, logged metrics, W&B, checkpointed history."""

from __future__ import annotations

import csv
import re
import shutil
from pathlib import Path

import lightning as L
import pytest
import torch
from omegaconf import OmegaConf
from tiny_data import tiny_data

from vitladder.analysis.callback import AttentionAnalysis
from vitladder.analysis.outputs import read_csv
from vitladder.analysis.summary import analyse


def made_files(results) -> set[str]:
    """The files the probes' results name: each table's CSV and each figure's PNG."""
    return {
        f"{name}.{kind}"
        for r in results.values()
        for kind, of in (("csv", r.tables), ("png", r.figures))
        for name in of
    }


def test_history_covers_initialisation_and_every_epoch(fitted_run) -> None:
    history = fitted_run.callback.history
    assert [r["epoch"] for r in history] == [0, 1, 2]
    for row in history:
        assert all(0 < row[f"layer{layer}/distance_px"] < 17 for layer in range(7))
        assert all(0 < row[f"layer{layer}/entropy_nats"] <= 4.175 for layer in range(7))


def test_final_analysis_files_match_the_final_model(fitted_run) -> None:
    out = fitted_run.run_dir / "analysis"
    results = fitted_run.callback.results
    assert list(results) == list(fitted_run.cfg.analysis.probes)  # the configured probes, in their order
    assert {p.name for p in out.iterdir()} == made_files(results)
    assert {"heads.csv", "layers.csv", "tracking.csv", "locality.png", "cls_attention.png", "ablation.csv",
            "ablation_mean.png", "position_similarity.png"} <= made_files(results)  # fmt: skip
    heads = read_csv(out / "heads.csv")
    assert len(heads) == 42 and list(heads[0])[:5] == ["layer", "head", "distance_px", "entropy_nats", "cls_share"]
    assert len(read_csv(out / "tracking.csv")) == 21

    test = fitted_run.datamodule.test
    again = analyse(
        fitted_run.trainer.lightning_module.model,
        test.images[:40],
        40,
        4,
        stats=fitted_run.datamodule.stats,
    )
    got = torch.tensor([[float(r["distance_px"]), float(r["entropy_nats"])] for r in heads]).view(7, 6, 2)
    assert torch.allclose(got[..., 0], again.heads["distance_px"], atol=1e-4)
    assert torch.allclose(got[..., 1], again.heads["entropy_nats"], atol=1e-4)
    assert fitted_run.callback.scalars["analysis_images"] == 40
    assert "test image 3 " in results["cls_attention"].figures["cls_attention"].get_suptitle()


def test_tracked_metrics_reach_the_csv_logger(fitted_run) -> None:
    rows = list(csv.DictReader((fitted_run.run_dir / "metrics.csv").open()))
    tracked = {
        float(row["epoch"]): float(row["track/layer1/distance_px"])
        for row in rows
        if row.get("track/layer1/distance_px")
    }
    history = {r["epoch"]: r["layer1/distance_px"] for r in fitted_run.callback.history}
    # epoch = epochs trained, as in the history: the point at initialisation is logged too, at epoch 0.
    assert tracked == pytest.approx({0: history[0], 1: history[1], 2: history[2]}, abs=1e-4)
    assert any(row.get("track/layer6/entropy_nats") for row in rows)
    positions = {float(row["epoch"]) for row in rows if row.get("track/position_grid_correlation")}
    assert positions == {0, 1, 2}  # the position embeddings' grid correlation, from initialisation on


def test_wandb_run_holds_the_analysis(fitted_run, wandb_run_reader) -> None:
    run = wandb_run_reader(next((fitted_run.run_dir / "wandb").glob("offline-run-*")))
    layer1 = fitted_run.callback.scalars["layer1_distance_px"]
    summary = run.summary
    assert summary["analysis/layer1_distance_px"] == pytest.approx(layer1, abs=1e-4)
    assert summary["analysis/images"] == 40
    for key in (
        "analysis/layer1_entropy_nats",
        "analysis/uniform_distance_px",
        "analysis/tracking.path",
        "analysis/heads.path",
        "analysis/figures/cls_attention.path",
        "analysis/distance_px_by_layer_table.path",
    ):
        assert key in summary, key
    # The final analysis is in the summary and in tables, never one-point scalar lines in the history.
    assert not [key for row in run.history for key in row if re.match(r"analysis/layer\d", key)]
    heads = run.table("analysis/heads")
    assert heads["columns"] == [
        "rung",
        "rung_index",
        "seed",
        "layer",
        "head",
        "distance_px",
        "entropy_nats",
        "cls_share",
        "distance_drop_px",
    ]
    assert len(heads["data"]) == 42 and {tuple(r[:3]) for r in heads["data"]} == {("patch4", 2, 0)}
    # Locality over training: every tracked epoch once, initialisation (epoch 0) included, against `epoch`.
    tracked = [row["epoch"] for row in run.history if "track/layer1/distance_px" in row]
    assert tracked == [0, 1, 2]
    assert {pattern: m["step_metric"] for pattern, m in run.metrics.items() if "*" in pattern} == {"*": "epoch"}


@pytest.mark.slow
def test_history_is_checkpointed_and_survives_a_resume(fitted_run, fit_fn, tmp_path: Path) -> None:
    ckpt = torch.load(fitted_run.run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    states = [s for s in ckpt["callbacks"].values() if "history" in s]
    assert len(states) == 1 and states[0]["history"] == fitted_run.callback.history

    run_dir = tmp_path / "resumed"
    shutil.copytree(fitted_run.run_dir, run_dir, ignore=shutil.ignore_patterns("wandb", "analysis"))
    cfg = OmegaConf.merge(fitted_run.cfg, {"run_dir": str(run_dir)})
    callback = AttentionAnalysis.from_config(cfg.analysis, out_dir=run_dir / "analysis", rung=cfg.rung, patch_px=4)
    fit_fn(cfg, callback, wandb_dir=None, ckpt_path=str(run_dir / "checkpoints" / "last.ckpt"), max_epochs=3)
    assert [r["epoch"] for r in callback.history] == [0, 1, 2, 3]
    assert callback.history[:3] == fitted_run.callback.history  # the old rows, initialisation included
    assert len(read_csv(run_dir / "analysis" / "tracking.csv")) == 28


def record_analysis_and_teardown(monkeypatch) -> list:
    """In order: "teardown" when Lightning's teardown moves the module to the CPU, and ("analysis", device) when the
    final analysis starts, with the device of the network's parameters."""
    from vitladder.analysis import callback as callback_module
    from vitladder.training.module import RecipeModule

    events: list = []
    cpu, final = RecipeModule.cpu, callback_module.run_probes
    monkeypatch.setattr(RecipeModule, "cpu", lambda self: events.append("teardown") or cpu(self))

    def recorded(model, *args, **kwargs):
        events.append(("analysis", next(model.parameters()).device))
        return final(model, *args, **kwargs)

    monkeypatch.setattr(callback_module, "run_probes", recorded)
    return events


def test_the_final_analysis_runs_on_the_training_device(tmp_path: Path, monkeypatch) -> None:
    # Lightning's teardown moves the module to the CPU between on_train_end and on_fit_end: the analysis comes first.
    from vitladder.config import compose_rung
    from vitladder.data.datamodule import ImageDataModule
    from vitladder.training.run import build_module

    events = record_analysis_and_teardown(monkeypatch)
    data = tiny_data(num_train=300, num_test=20, val_size=100, batch_size=100)
    cfg = compose_rung("patch4", ["profile=smoke", *data, "model.depth=2", "analysis.track_every_n_epochs=0"])
    datamodule = ImageDataModule(cfg.data)
    datamodule.setup()

    def fit(out_dir: Path, ckpt_path: Path | None = None) -> tuple[L.Trainer, AttentionAnalysis]:
        callback = AttentionAnalysis.from_config(cfg.analysis, out_dir, rung=cfg.rung, patch_px=4, data=datamodule)
        trainer = L.Trainer(
            accelerator="cpu",
            max_epochs=1,
            limit_val_batches=0,
            logger=False,
            enable_checkpointing=False,
            default_root_dir=tmp_path,
            callbacks=[callback],
        )
        trainer.fit(build_module(cfg, datamodule), datamodule=datamodule, ckpt_path=ckpt_path)
        return trainer, callback

    trainer, _ = fit(tmp_path / "analysis")
    assert trainer.global_step == 2 and events == [("analysis", trainer.strategy.root_device), "teardown"]

    # Resumed after its last epoch, a run trains nothing and Lightning skips on_train_end: the analysis comes after
    # the teardown, with the module moved back to the training device, and left on the CPU as the teardown left it.
    trainer.save_checkpoint(tmp_path / "last.ckpt")
    events.clear()
    trainer, callback = fit(tmp_path / "again", ckpt_path=tmp_path / "last.ckpt")
    assert trainer.global_step == 2, "nothing left to train"
    assert events[:2] == ["teardown", ("analysis", trainer.strategy.root_device)] and callback.results is not None
    assert next(trainer.lightning_module.parameters()).device.type == "cpu"


def test_state_dict_round_trip_and_config() -> None:
    cfg = OmegaConf.create(
        {
            "enabled": True,
            "num_images": 10,
            "batch_size": 5,
            "example_image": 2,
            "track_every_n_epochs": 3,
            "track_images": 4,
            "probes": ["attention"],
        }
    )
    callback = AttentionAnalysis.from_config(cfg, out_dir=Path("x"), rung="warmup", patch_px=8)
    assert (
        callback.num_images,
        callback.batch_size,
        callback.example_image,
        callback.track_every_n_epochs,
        callback.track_images,
        callback.patch_px,
        callback.probes,
    ) == (10, 5, 2, 3, 4, 8, ("attention",))
    callback.history = [{"epoch": 0, "layer0/distance_px": 1.0, "layer0/entropy_nats": 2.0}]
    other = AttentionAnalysis(out_dir="y", rung="warmup", patch_px=8)
    other.load_state_dict(callback.state_dict())
    assert other.history == callback.history
    other.load_state_dict({"history": [{"epoch": 3, "layer": 1, "distance": 5.0, "entropy": 1.5}]})  # older keys
    assert other.history == [{"epoch": 3, "layer1/distance_px": 5.0, "layer1/entropy_nats": 1.5}]


def test_disabled_callback_does_nothing() -> None:
    callback = AttentionAnalysis(out_dir="never", rung="patch8", patch_px=8, enabled=False)

    class Trainer:  # would fail on any attribute access beyond these
        is_global_zero = True
        current_epoch = 0

    callback.on_train_start(Trainer(), None)
    callback.on_train_epoch_end(Trainer(), None)
    callback.on_train_end(Trainer(), None)
    callback.on_fit_end(Trainer(), None)
    assert callback.history == [] and callback.results is None and not Path("never").exists()
