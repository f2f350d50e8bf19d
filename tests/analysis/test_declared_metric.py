"""A metric is one entry: a toy metric added to ``metrics.METRICS``, and nothing else, reaches the CSVs,
the tracking during training, the run's figures, its W&B analysis log and the ladder report."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from PIL import Image
from torch import Tensor, nn

from vitladder.analysis import metrics
from vitladder.analysis.callback import AttentionAnalysis
from vitladder.analysis.capture import capture_attention
from vitladder.analysis.metrics import HeadMetric
from vitladder.analysis.outputs import read_csv, write_csv
from vitladder.analysis.probes.attention import layer_rows
from vitladder.analysis.summary import analyse
from vitladder.data.augment import normalize
from vitladder.data.datamodule import Split
from vitladder.data.sources.cifar10 import STATS as CIFAR10_STATS
from vitladder.model import ViTConfig, build_vit
from vitladder.report.ladder_report import build_report, collect
from vitladder.report.report_run import charts, report_tables, rung_lines
from vitladder.wandb.analysis import log_analysis

PATCH = 8  # a 4x4 grid: T = 17 tokens


def self_share(attn: Tensor) -> Tensor:
    """Attention a patch query gives its own patch, per head: ``(B, H, T, T) -> (H,)``."""
    return attn[:, :, 1:, 1:].diagonal(dim1=-2, dim2=-1).float().mean(dim=(0, 2))


TOY = HeadMetric(
    "self_share",
    lambda attn, px: self_share(attn),
    "self share",
    "",
    "self",
    digits=3,
    uniform=lambda grid, px: 1 / (1 + grid * grid),
)


@pytest.fixture
def toy(monkeypatch) -> HeadMetric:
    """The registry with the toy metric declared last, as a newcomer would add it."""
    monkeypatch.setattr(metrics, "METRICS", (*metrics.METRICS, TOY))
    return TOY


def tiny_vit() -> nn.Module:
    torch.manual_seed(0)
    return build_vit(ViTConfig(patch_size=PATCH, embed_dim=24, depth=3)).eval()


def some_images(n: int, seed: int) -> Tensor:
    return torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


class FakeRun:
    """What log_analysis uses of a W&B run: ``log`` and ``summary``."""

    def __init__(self) -> None:
        self.logged: dict = {}
        self.summary: dict = {}

    def log(self, payload: dict) -> None:
        self.logged.update(payload)


def test_a_declared_metric_reaches_tracking_csvs_figures_and_wandb(tmp_path: Path, toy: HeadMetric) -> None:
    model = tiny_vit()
    val, test = some_images(6, 1), some_images(5, 2)
    datamodule = SimpleNamespace(
        val=Split(val, torch.arange(6)), test=Split(test, torch.arange(5)), classes=None, stats=CIFAR10_STATS
    )
    trainer = SimpleNamespace(datamodule=datamodule, current_epoch=0, is_global_zero=True, loggers=[])
    logged: dict = {}
    module = SimpleNamespace(model=model, log=lambda key, value, **_: logged.update({key: value}))
    callback = AttentionAnalysis(
        tmp_path / "analysis",
        rung="patch8",
        patch_px=PATCH,
        num_images=5,
        batch_size=4,
        track_every_n_epochs=1,
        track_images=6,
        data=datamodule,
    )

    callback.on_train_epoch_end(trainer, module)  # tracking: epoch 1
    callback.on_train_end(trainer, module)  # the final analysis: CSVs and figures

    _, maps = capture_attention(model, normalize(test, CIFAR10_STATS.mean, CIFAR10_STATS.std))  # [(5, H, T, T)] * L
    expected = torch.stack([self_share(a) for a in maps])  # (L, H)
    _, val_maps = capture_attention(model, normalize(val, CIFAR10_STATS.mean, CIFAR10_STATS.std))
    tracked = [self_share(a).mean().item() for a in val_maps]  # (L,) layer means
    assert [callback.history[0][f"layer{layer}/self_share"] for layer in range(3)] == pytest.approx(tracked, abs=1e-6)
    assert logged["track/layer2/self_share"] == pytest.approx(tracked[2], abs=1e-6)

    out = tmp_path / "analysis"
    heads = read_csv(out / "heads.csv")
    assert [float(r["self_share"]) for r in heads] == pytest.approx(expected.flatten().tolist(), abs=1e-6)
    layers = read_csv(out / "layers.csv")
    assert [float(r["self_share"]) for r in layers] == pytest.approx(expected.mean(dim=1).tolist(), abs=1e-6)
    assert {float(r["uniform_self_share"]) for r in layers} == {round(1 / 17, 6)}
    assert [float(r["self_share"]) for r in read_csv(out / "tracking.csv")] == pytest.approx(tracked, abs=1e-6)
    assert callback.files["self"] == out / "self.png"
    with Image.open(out / "self.png") as image:
        assert image.format == "PNG" and min(image.size) > 200
    done = callback.scalars
    assert done["layer1_self_share"] == pytest.approx(expected[1].mean().item(), abs=1e-6)
    assert done["uniform_self_share"] == pytest.approx(1 / 17, abs=1e-6)

    run = FakeRun()
    log_analysis(run, callback)
    assert run.summary["analysis/layer1_self_share"] == pytest.approx(expected[1].mean().item(), abs=1e-6)
    assert run.summary["analysis/uniform_self_share"] == pytest.approx(1 / 17, abs=1e-6)
    for table in ("analysis/heads", "analysis/layers"):
        assert "self_share" in run.logged[table].columns
    chart = run.logged["analysis/self_share_by_layer"]
    assert chart.spec.fields["y"] == "self_share" and chart.spec.string_fields["title"] == "patch8: self share by layer"
    assert "analysis/figures/self" in run.logged


def test_a_declared_metric_reaches_the_ladder_report(tmp_path: Path, toy: HeadMetric) -> None:
    ladder = tmp_path / "smoke"
    summary = analyse(tiny_vit(), some_images(4, 3), batch_size=4, patch_px=PATCH, stats=CIFAR10_STATS)
    rows = layer_rows(summary)
    toy_done = {"layer1_self_share": rows[1]["self_share"], "uniform_self_share": 1 / 17}
    for rung in ("patch8", "augment"):
        run = ladder / rung
        (run / "analysis").mkdir(parents=True)
        # augment was analysed before the toy metric was declared: neither done.json nor layers.csv has it
        done = {"rung": rung, "seed": 0, "test_acc": 0.5, **(toy_done if rung == "patch8" else {})}
        (run / "done.json").write_text(json.dumps(done))
        written = rows if rung == "patch8" else [{k: v for k, v in r.items() if "self_share" not in k} for r in rows]
        write_csv(run / "analysis" / "layers.csv", list(written[0]), written)

    report = build_report(ladder).read_text()

    ladder_csv = {r["rung"]: r for r in read_csv(ladder / "ladder.csv")}
    assert float(ladder_csv["patch8"]["layer1_self_share"]) == pytest.approx(rows[1]["self_share"], abs=1e-6)
    assert ladder_csv["augment"]["layer1_self_share"] == ""  # not measured there: an empty cell
    header = next(line for line in report.splitlines() if line.startswith("| rung |"))
    assert "| uniform (px) | layer-1 self share | uniform |" in header  # after the metrics declared before it
    patch8 = next(line for line in report.splitlines() if line.startswith("| `patch8` |"))
    assert f"| {rows[1]['self_share']:.3f} | {1 / 17:.3f} |" in patch8
    assert "![self per layer](self_by_layer.png)" in report and "`self.png`" in report
    with Image.open(ladder / "self_by_layer.png") as image:
        assert image.format == "PNG"

    results = collect(ladder)
    tables = report_tables(results)
    columns, layer_table = tables["layers"]
    patch8_rows = [r for r in layer_table if r[0] == "patch8"]
    assert [r[columns.index("self_share")] for r in patch8_rows] == pytest.approx([r["self_share"] for r in rows])
    assert "layer1_self_share" in tables["ladder"][0] and "layer1_self_share" in tables["runs"][0]
    by_layer = ("layers", "layer", "self_share", "rung", "self share by layer")
    assert charts(results)["report/self_share_by_layer"] == by_layer
    assert (
        "epoch",
        "track/layer1/self_share",
        "layer-1 self share during training (0 = initialisation)",
    ) in rung_lines(results)
