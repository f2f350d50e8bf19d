"""The analysis folder: each probe's tables and figures as files, exact CSV layouts, real PNGs, done.json's numbers,
and the tracked history read back from a checkpoint or metrics.csv, older layouts included."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from vitladder.analysis.outputs import done_scalars, history_rows, read_analysis_csv, read_csv, write_results
from vitladder.analysis.probes import Context, run_probes
from vitladder.analysis.summary import analyse
from vitladder.data.sources.cifar10 import STATS as CIFAR10_STATS
from vitladder.model import ViTConfig, build_vit

CLASSES = tuple(f"class{i}" for i in range(10))
PROBES = ("attention", "cls_attention")


def history() -> tuple[dict, ...]:
    return tuple(
        {"epoch": e, **{f"layer{layer}/distance_px": 16.0 - e * layer / 4 for layer in range(7)},
         **{f"layer{layer}/entropy_nats": 4.1 - e * 0.1 for layer in range(7)}}
        for e in range(3)
    )  # fmt: skip


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return build_vit(ViTConfig(patch_size=4, embed_dim=24))


@pytest.fixture(scope="module")
def images() -> torch.Tensor:
    return torch.randint(0, 256, (6, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(2))


def results_of(model, images, tracked=()):
    ctx = Context("patch4", 0, 4, 8, CIFAR10_STATS, CLASSES, batch_size=4, example_index=2, history=tracked)
    return run_probes(model, images, torch.arange(6), ctx, PROBES)


def assert_real_png(path: Path, min_side: int = 200) -> None:
    with Image.open(path) as image:
        assert image.format == "PNG"
        assert min(image.size) >= min_side, image.size
        lo, hi = image.convert("L").getextrema()
        assert hi - lo > 50, "a blank figure"


def test_each_probes_tables_and_figures_become_files(tmp_path: Path, model, images) -> None:
    results = results_of(model, images, history())
    files = write_results(results, tmp_path)
    csvs = {f"{name}.csv" for r in results.values() for name in r.tables}
    pngs = {f"{name}.png" for r in results.values() for name in r.figures}
    assert csvs == {"heads.csv", "layers.csv", "tracking.csv"}
    assert pngs == {"distance.png", "entropy.png", "explainer.png", "cls_attention.png", "locality.png"}
    assert {p.name for p in files.values()} == {p.name for p in tmp_path.iterdir()} == csvs | pngs  # no temp files

    summary = analyse(model, images, batch_size=4, patch_px=4, stats=CIFAR10_STATS)
    heads = read_csv(tmp_path / "heads.csv")
    assert list(heads[0]) == ["layer", "head", "distance_px", "entropy_nats", "cls_share", "distance_drop_px"]
    assert [(int(r["layer"]), int(r["head"])) for r in heads] == [(layer, h) for layer in range(7) for h in range(6)]
    assert float(heads[13]["distance_px"]) == pytest.approx(float(summary.heads["distance_px"][2, 1]), abs=1e-5)

    layers = read_csv(tmp_path / "layers.csv")
    assert list(layers[0]) == [
        "layer", "distance_px", "entropy_nats", "cls_share", "distance_drop_px",
        "uniform_distance_px", "uniform_entropy_nats", "uniform_distance_drop_px",
    ]  # fmt: skip
    for layer, row in enumerate(layers):
        head_mean = sum(float(r["entropy_nats"]) for r in heads if int(r["layer"]) == layer) / 6
        assert float(row["entropy_nats"]) == pytest.approx(head_mean, abs=1e-5)
        assert float(row["uniform_distance_px"]) == pytest.approx(16.5459, abs=1e-4)
        assert float(row["uniform_entropy_nats"]) == pytest.approx(4.174387, abs=1e-5)

    tracked = read_csv(tmp_path / "tracking.csv")  # one row per tracked epoch and layer
    assert [(int(r["epoch"]), int(r["layer"])) for r in tracked] == [(e, layer) for e in range(3) for layer in range(7)]
    assert float(tracked[9]["distance_px"]) == pytest.approx(16.0 - 1 * 2 / 4)
    for name in pngs:
        assert_real_png(tmp_path / name)


def test_without_history_no_tracking_files(tmp_path: Path, model, images) -> None:
    write_results(results_of(model, images), tmp_path)
    assert {"tracking.csv", "locality.png"}.isdisjoint(p.name for p in tmp_path.iterdir())


def test_done_scalars(model, images) -> None:
    done = done_scalars(results_of(model, images), num_images=6)
    summary = analyse(model, images, batch_size=4, patch_px=4, stats=CIFAR10_STATS)
    assert done["layer1_distance_px"] == pytest.approx(float(summary.layers["distance_px"][1]), abs=1e-5)
    assert done["layer1_entropy_nats"] == pytest.approx(float(summary.layers["entropy_nats"][1]), abs=1e-5)
    assert done["uniform_distance_px"] == pytest.approx(16.5459, abs=1e-4)
    assert done["analysis_images"] == 6
    assert set(done) == {
        "layer1_distance_px", "uniform_distance_px", "layer1_entropy_nats", "uniform_entropy_nats",
        "layer1_distance_drop_px", "uniform_distance_drop_px", "analysis_images",
    }  # fmt: skip


def test_older_folders_and_histories_still_read(tmp_path: Path) -> None:
    """Folders written before the names were unified (mean_distance_px, distance, entropy) read under today's
    names; a history of one row per layer (checkpoints before the probes) reads as one row per epoch."""
    (tmp_path / "layers.csv").write_text("layer,mean_distance_px,entropy_nats,mean_distance_drop_px\n1,12.5,3.1,11.0\n")
    assert read_analysis_csv(tmp_path / "layers.csv") == [
        {"layer": "1", "distance_px": "12.5", "entropy_nats": "3.1", "distance_drop_px": "11.0"}
    ]
    old = [{"epoch": 0, "layer": 0, "distance": 16.5, "entropy": 4.17}, {"epoch": 0, "layer": 1, "distance_px": 9.0}]
    assert history_rows(old) == [{"epoch": 0, "layer0/distance_px": 16.5, "layer0/entropy_nats": 4.17,
                                  "layer1/distance_px": 9.0}]  # fmt: skip
    metrics_csv = [  # metrics.csv: epoch rows with track/ columns among others, lr rows without an epoch
        {"epoch": "0", "step": "0", "track/layer1/distance_px": "16.0", "train/loss": ""},
        {"epoch": "", "step": "5", "lr": "0.001"},
        {"epoch": "1.0", "step": "54", "track/layer1/distance_px": "12.0", "train/loss": "2.1"},
        {"epoch": "1.0", "step": "54", "val/acc": "0.3"},
    ]
    assert history_rows(metrics_csv, "track/") == [
        {"epoch": 0, "layer1/distance_px": 16.0},
        {"epoch": 1, "layer1/distance_px": 12.0},
    ]


def test_a_checkpoints_history_keeps_rows_of_numbers_only() -> None:
    from vitladder.analysis.checkpoint import _history  # the rows of a file that may come from anyone

    rows = [{"epoch": 0, "layer1/distance_px": 3.0}, {"epoch": True, "x": 1.0}, "junk", {"epoch": 1, "x": "1"}]
    assert _history({"callbacks": {"AttentionAnalysis": {"history": rows}}}) == [
        {"epoch": 0, "layer1/distance_px": 3.0}
    ]
    assert (
        _history({"callbacks": {"AttentionAnalysis": {"history": [{"epoch": 0, "layer": 1e400, "distance": 1.0}]}}})
        == []
    )
    assert _history({"callbacks": "junk"}) == []


def test_an_undefined_scalar_is_null_in_done_json() -> None:
    # Spearman's rho of a model whose every ablation costs the same is undefined: JSON has no NaN, and a summary
    # read back must equal the one written.
    from vitladder.analysis.probes import Result

    done = done_scalars({"probe": Result(scalars={"rho": float("nan"), "x": 0.1234567})}, num_images=2)
    assert done == {"rho": None, "x": 0.123457, "analysis_images": 2}
