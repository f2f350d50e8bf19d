"""The run folder's names and its "finished" rule, shared by every reader and writer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vitladder.run_folder import (
    RunPaths,
    checkpoint_of,
    final_model,
    is_finished,
    parse_run_name,
    read_summary,
    run_folder_of,
    seed_suffix,
)


@pytest.mark.parametrize(
    ("rung", "seed", "name"),
    [("warmup", 0, "warmup"), ("warmup", 2, "warmup-seed2"), ("mixup_cutmix", 13, "mixup_cutmix-seed13")],
)
def test_a_rung_and_seed_name_their_folder_and_back(rung, seed, name):
    assert rung + seed_suffix(seed) == name
    assert parse_run_name(name) == (rung, seed)


@pytest.mark.parametrize("name", ["report", "Warmup", "warmup-seed", "warmup-seedx", "warmup.replaced-2026", ".lock"])
def test_other_folders_are_not_runs_or_not_these_runs(name):
    parsed = parse_run_name(name)
    assert parsed is None or parsed == (name, 0)  # "report" parses as a rung name: the caller checks the rung


def test_the_layout(tmp_path):
    paths = RunPaths(tmp_path)
    relative = {
        name: getattr(paths, name).relative_to(tmp_path).as_posix()
        for name in (
            "config",
            "overrides",
            "provenance",
            "metrics_csv",
            "checkpoints",
            "last_ckpt",
            "model",
            "model_pt",
            "analysis",
            "layers_csv",
            "done",
        )
    }
    assert relative == {
        "config": "config.yaml",
        "overrides": "overrides.yaml",
        "provenance": "provenance.json",
        "metrics_csv": "metrics.csv",
        "checkpoints": "checkpoints",
        "last_ckpt": "checkpoints/last.ckpt",
        "model": "checkpoints/model.safetensors",
        "model_pt": "checkpoints/model.pt",
        "analysis": "analysis",
        "layers_csv": "analysis/layers.csv",
        "done": "done.json",
    }


def test_finished_means_done_json_and_nothing_else(tmp_path):
    paths = RunPaths(tmp_path)
    paths.checkpoints.mkdir()
    paths.model.write_bytes(b"model")
    assert not is_finished(tmp_path)  # a saved model without done.json: the run may have died after it
    paths.done.mkdir()
    assert not is_finished(tmp_path)  # a folder named done.json is not a finished run
    paths.done.rmdir()
    paths.done.write_text(json.dumps({"test_acc": 0.5}))
    assert is_finished(tmp_path) and read_summary(tmp_path) == {"test_acc": 0.5}


def test_the_checkpoint_of_a_folder_is_the_final_model_else_last_ckpt(tmp_path):
    paths = RunPaths(tmp_path)
    assert checkpoint_of(tmp_path) is None
    paths.checkpoints.mkdir()
    paths.last_ckpt.write_bytes(b"last")
    assert checkpoint_of(tmp_path) == paths.last_ckpt and final_model(tmp_path) is None
    paths.model_pt.write_bytes(b"an older version's model")
    assert checkpoint_of(tmp_path) == final_model(tmp_path) == paths.model_pt
    paths.model.write_bytes(b"model")
    assert checkpoint_of(tmp_path) == final_model(tmp_path) == paths.model


def test_a_checkpoint_belongs_to_the_run_folder_that_holds_its_config(tmp_path):
    paths = RunPaths(tmp_path / "warmup")
    paths.checkpoints.mkdir(parents=True)
    assert run_folder_of(paths.model) is None  # no config.yaml: not a run folder
    paths.config.write_text("rung: warmup\n")
    assert run_folder_of(paths.model) == paths.root
    assert run_folder_of(Path(tmp_path / "elsewhere" / "model.pt")) is None
    assert run_folder_of(paths.root / "exported.pt") == paths.root  # a file beside config.yaml: that folder
