"""The analysis folder: exact CSV layouts, real PNG figures, headline numbers for done.json."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from vitladder.analysis.outputs import (
    analysis_summary_for_done,
    heads_columns,
    layers_columns,
    read_analysis_csv,
    read_csv,
    read_tracking,
    tracking_columns,
    write_analysis,
)
from vitladder.analysis.summary import AttentionSummary, analyse
from vitladder.model import ViTConfig, build_vit

CLASSES = tuple(f"class{i}" for i in range(10))


@pytest.fixture(scope="module")
def summary() -> AttentionSummary:
    torch.manual_seed(0)
    model = build_vit(ViTConfig(patch_size=4, embed_dim=24))
    images = torch.randint(0, 256, (6, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(2))
    return analyse(model, images, batch_size=4, patch_px=4, labels=torch.arange(6), example_index=2)


def history() -> list[dict]:
    return [
        {"epoch": e, "layer": layer, "distance_px": 16.0 - e * layer / 4, "entropy_nats": 4.1 - e * 0.1}
        for e in range(3)
        for layer in range(7)
    ]


def assert_real_png(path: Path, min_side: int = 200) -> None:
    with Image.open(path) as image:
        assert image.format == "PNG"
        assert min(image.size) >= min_side, image.size
        lo, hi = image.convert("L").getextrema()
        assert hi - lo > 50, "a blank figure"


def test_write_analysis_files(tmp_path: Path, summary: AttentionSummary) -> None:
    files = write_analysis(summary, tmp_path, "patch4", CLASSES, history())
    expected = {
        "heads.csv",
        "layers.csv",
        "tracking.csv",
        "distance.png",
        "entropy.png",
        "explainer.png",
        "cls_attention.png",
        "locality.png",
    }
    assert {p.name for p in files.values()} == expected
    assert {p.name for p in tmp_path.iterdir()} == expected  # no temporary files left behind

    heads = read_csv(tmp_path / "heads.csv")
    assert len(heads) == 42
    assert list(heads[0])[:5] == ["layer", "head", "distance_px", "entropy_nats", "cls_share"]
    assert tuple(heads[0]) == heads_columns()
    assert [(int(r["layer"]), int(r["head"])) for r in heads] == [(layer, h) for layer in range(7) for h in range(6)]
    assert float(heads[13]["distance_px"]) == pytest.approx(float(summary.heads["distance_px"][2, 1]), abs=1e-5)

    layers = read_csv(tmp_path / "layers.csv")
    assert len(layers) == 7 and tuple(layers[0]) == layers_columns()
    for layer, row in enumerate(layers):
        head_mean = sum(float(r["entropy_nats"]) for r in heads if int(r["layer"]) == layer) / 6
        assert float(row["entropy_nats"]) == pytest.approx(head_mean, abs=1e-5)
        assert float(row["uniform_distance_px"]) == pytest.approx(16.5459, abs=1e-4)
        assert float(row["uniform_entropy_nats"]) == pytest.approx(4.174387, abs=1e-5)

    tracked = read_tracking(tmp_path)
    assert [(r["epoch"], r["layer"]) for r in tracked] == [(r["epoch"], r["layer"]) for r in history()]
    assert [r["entropy_nats"] for r in tracked] == pytest.approx([r["entropy_nats"] for r in history()], abs=1e-6)
    for name in expected - {"heads.csv", "layers.csv", "tracking.csv"}:
        assert_real_png(tmp_path / name)


def test_without_history_or_example_fewer_files(tmp_path: Path, summary: AttentionSummary) -> None:
    bare = AttentionSummary(
        summary.heads, summary.patch_px, summary.grid, summary.num_images, summary.uniform, example=None
    )
    files = write_analysis(bare, tmp_path, "patch4")
    assert {p.name for p in files.values()} == {
        "heads.csv",
        "layers.csv",
        "distance.png",
        "entropy.png",
        "explainer.png",
    }
    assert read_tracking(tmp_path) == []


def test_summary_for_done(summary: AttentionSummary) -> None:
    done = analysis_summary_for_done(summary)
    assert done["layer1_distance_px"] == pytest.approx(float(summary.layers["distance_px"][1]), abs=1e-5)
    assert done["layer1_entropy_nats"] == pytest.approx(float(summary.layers["entropy_nats"][1]), abs=1e-5)
    assert done["uniform_distance_px"] == pytest.approx(16.5459, abs=1e-4)
    assert done["analysis_images"] == 6


def test_one_name_per_quantity_and_older_folders_still_read(tmp_path: Path, summary: AttentionSummary) -> None:
    """distance_px / entropy_nats / cls_share / distance_drop_px in every CSV; folders written before the
    names were unified (mean_distance_px, distance, entropy) are read under today's names."""
    assert set(heads_columns()) - {"layer", "head"} == {"distance_px", "entropy_nats", "cls_share", "distance_drop_px"}
    assert tracking_columns() == ("epoch", "layer", "distance_px", "entropy_nats")
    (tmp_path / "layers.csv").write_text("layer,mean_distance_px,entropy_nats,mean_distance_drop_px\n1,12.5,3.1,11.0\n")
    (tmp_path / "tracking.csv").write_text("epoch,layer,distance,entropy\n0,1,16.5,4.17\n")
    assert read_analysis_csv(tmp_path / "layers.csv") == [
        {"layer": "1", "distance_px": "12.5", "entropy_nats": "3.1", "distance_drop_px": "11.0"}
    ]
    assert read_tracking(tmp_path) == [{"epoch": 0, "layer": 1, "distance_px": 16.5, "entropy_nats": 4.17}]
    files = write_analysis(summary, tmp_path / "again", "patch4", CLASSES, read_tracking(tmp_path))
    assert read_csv(files["tracking"]) == [{"epoch": "0", "layer": "1", "distance_px": "16.5", "entropy_nats": "4.17"}]
