"""The benchmark runs end to end with tiny step counts and writes every figure (no timing assertions)."""

from __future__ import annotations

import json

import pytest
from entry_points import load_script

from vitladder.config import compose_rung
from vitladder.devtools.benchmark import format_table, run_benchmark, settings_for

FIGURES = {
    "project_images_per_s",
    "bare_images_per_s",
    "project_over_bare",
    "project_step_s",
    "bare_step_s",
    "data_batch_s",
    "data_share",
    "epoch_s",
    "analysis_s",
    "forward_s",
    "analysis_over_forward",
    "analysis_images",
    "parameters",
    "precision",
    "settings",
    "rounds",
    "meets_targets",
}
TINY_RUN = dict(
    batch_size=16, warmup=1, steps=2, rounds=2, analysis_images=32, analysis_batch_size=16, analysis_rounds=1
)


def test_the_benchmark_reports_every_figure():
    report = run_benchmark(["tiny"], "cpu", TINY_RUN, log=lambda _: None)
    assert report["device"] == "cpu" and set(report["widths"]) == {"tiny"}
    figures = report["widths"]["tiny"]
    assert FIGURES <= set(figures)
    for key in (
        "project_images_per_s",
        "bare_images_per_s",
        "project_over_bare",
        "data_share",
        "epoch_s",
        "analysis_over_forward",
    ):
        assert figures[key] > 0, key
    assert figures["epoch_s"] == pytest.approx(45_000 / figures["project_images_per_s"])
    assert figures["settings"]["embed_dim"] == 48 and figures["analysis_images"] == 32
    assert all(len(times) == 2 for times in figures["rounds"].values())
    assert figures["meets_targets"]["analysis_over_forward"] is None  # the 1.3x target is the full model's
    table = format_table(report)
    for label in ("project / bare", "data share of a step", "analysis / forward", "CIFAR-10 epoch"):
        assert label in table


def test_the_script_writes_the_json(tmp_path, repo_root, capsys):
    out = tmp_path / "bench.json"
    bench = load_script("bench")
    bench.main(
        [
            "--width",
            "tiny",
            "--device",
            "cpu",
            "--out",
            str(out),
            "--batch-size",
            "16",
            "--warmup",
            "1",
            "--steps",
            "1",
            "--rounds",
            "1",
            "--analysis-images",
            "16",
        ]
    )
    report = json.loads(out.read_text())
    assert FIGURES <= set(report["widths"]["tiny"])
    assert report["targets"]["project_over_bare_min"] == 0.95
    assert "project / bare" in capsys.readouterr().out


def test_default_settings_fit_the_cpu():
    tiny, full = settings_for("tiny", "cpu"), settings_for("full", "cpu")
    assert (tiny.embed_dim, full.embed_dim) == (48, 384)
    assert full.batch_size * (full.warmup + full.steps + 1) * full.rounds * 2 <= 3200  # 20-40 img/s: a few minutes
    with pytest.raises(ValueError, match="width"):
        settings_for("huge", "cpu")


def test_the_gpu_benchmark_times_the_recipes_batch():
    assert settings_for("full", "cuda").batch_size == compose_rung("patch4", []).data.batch_size == 128
