"""The order of a run's final writes: done.json marks a rung finished, so it must come last.

Every output is written to a temporary name and renamed (vitladder.atomic); the order of those
renames is the order in which files become visible. A crash before done.json (here: the disk
filling up while model.pt is written) must leave the rung unfinished, and running it again
finishes it from last.ckpt.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
import torch

from vitladder.model import ViTConfig, build_vit
from vitladder.training.run import RunPaths, is_finished, read_summary, train_rung


@pytest.fixture
def cfg(tiny_cfg, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")  # the W&B run is not what this test is about
    return tiny_cfg("patch8", "model.depth=2", "data.num_train=300", "data.val_size=60", "data.num_test=40",
                    "analysis.num_images=8", "analysis.track_every_n_epochs=0")


def record_renames(monkeypatch, root: Path, fail_on: str | None = None) -> list[str]:
    """Names (relative to the run folder) that os.replace made visible, in order; optionally a full disk
    for one of them."""
    renames: list[str] = []
    replace = os.replace

    def recording(src, dst, *args, **kwargs):
        dst = Path(dst)
        if fail_on is not None and dst.name == fail_on:
            raise OSError(errno.ENOSPC, "No space left on device")
        replace(src, dst, *args, **kwargs)
        if dst.is_relative_to(root):
            renames.append(dst.relative_to(root).as_posix())

    monkeypatch.setattr(os, "replace", recording)
    return renames


def test_done_json_comes_last_and_after_model_pt_also_after_a_crash_between_them(cfg, monkeypatch) -> None:
    paths = RunPaths(Path(cfg.run_dir))
    record_renames(monkeypatch, paths.root, fail_on="model.pt")
    with pytest.raises(OSError, match="No space left"):
        train_rung(cfg)
    assert paths.last_ckpt.is_file() and not paths.model.exists()
    assert not paths.done.exists() and not is_finished(paths.root), "a rung whose model was never saved is finished"
    monkeypatch.undo()

    monkeypatch.setenv("WANDB_MODE", "disabled")
    renames = record_renames(monkeypatch, paths.root)
    summary = train_rung(cfg)  # resumes from last.ckpt: nothing left to train; tests, analyses and saves
    assert renames[-1] == "done.json" and renames.count("done.json") == 1, renames
    assert "checkpoints/model.pt" in renames
    assert {"analysis/heads.csv", "analysis/layers.csv"} <= set(renames)

    # what the final files hold: the trained weights, and the summary of this very run
    saved = torch.load(paths.model, map_location="cpu", weights_only=True)
    last = torch.load(paths.last_ckpt, map_location="cpu", weights_only=False)["state_dict"]
    model = build_vit(ViTConfig(**saved["vit_config"]))
    model.load_state_dict(saved["state_dict"])
    assert all(torch.equal(value, last[f"model.{key}"]) for key, value in saved["state_dict"].items())
    assert (saved["format"], saved["rung"], saved["ladder"]) == ("vitladder-model/1", "patch8", "smoke")
    assert len(saved["classes"]) == 10 and saved["vit_config"]["depth"] == 2
    assert json.loads(paths.done.read_text()) == summary
    assert summary["epochs"] == 1 and summary["rung"] == "patch8" and summary["seed"] == 0

    renames.clear()
    assert is_finished(paths.root) and read_summary(paths.root) == summary
    assert train_rung(cfg) == summary and renames == []  # a finished rung is skipped untouched
