"""scripts/analyze.py on everything the training writes, and one clean line for anything else."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from entry_points import load_script

from vitladder.analysis.checkpoint import load_model
from vitladder.analysis.outputs import read_csv
from vitladder.errors import CheckpointError
from vitladder.run_folder import RunPaths
from vitladder.safe_load import load_checkpoint_file
from vitladder.training.recipe import run_lock

REPO = Path(__file__).resolve().parents[2]


def head_values(folder: Path) -> torch.Tensor:
    rows = read_csv(folder / "heads.csv")
    assert len(rows) == 42
    return torch.tensor([[float(r["distance_px"]), float(r["entropy_nats"]), float(r["cls_share"])] for r in rows])


def copy_run(fitted_run, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(fitted_run.run_dir, run, ignore=shutil.ignore_patterns("wandb"))
    return run


def test_run_folder_gives_the_callbacks_numbers(fitted_run, tmp_path: Path) -> None:
    out = load_script("analyze").main([str(fitted_run.run_dir), "--out", str(tmp_path / "a"), "--device", "cpu"])
    assert out == tmp_path / "a"
    assert torch.allclose(head_values(out), head_values(fitted_run.run_dir / "analysis"), atol=1e-4)
    assert {"distance.png", "entropy.png", "cls_attention.png", "explainer.png"} <= {p.name for p in out.iterdir()}


def test_default_output_keeps_the_tracking_history(fitted_run, tmp_path: Path) -> None:
    run = copy_run(fitted_run, tmp_path)
    (run / "analysis" / "heads.csv").unlink()
    (run / "analysis" / "locality.png").unlink()
    (run / "done.json").write_text(json.dumps({"rung": "patch4", "test_acc": 0.5, "layer1_distance_px": -1.0}))
    out = load_script("analyze").main([str(run), "--images", "10", "--batch-size", "4"])
    assert out == run / "analysis" and (out / "heads.csv").is_file() and (out / "locality.png").is_file()
    assert len(read_csv(out / "tracking.csv")) == 21  # the history from the run's metrics.csv
    # done.json, which the ladder report reads, follows the new analysis; its other results stay
    done = json.loads((run / "done.json").read_text())
    assert done["test_acc"] == 0.5 and done["analysis_images"] == 10 and 0 < done["layer1_distance_px"] < 17


def test_lightning_checkpoint_and_compiled_keys(fitted_run, tmp_path: Path) -> None:
    run = copy_run(fitted_run, tmp_path)
    reference = head_values(fitted_run.run_dir / "analysis")
    out = load_script("analyze").main([str(run / "checkpoints" / "last.ckpt"), "--out", str(tmp_path / "ckpt")])
    assert torch.allclose(head_values(out), reference, atol=1e-4)
    assert len(read_csv(out / "tracking.csv")) == 21  # the history travels in the Lightning checkpoint

    ckpt = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    ckpt["state_dict"] = {k.replace("model.", "model._orig_mod.", 1): v for k, v in ckpt["state_dict"].items()}
    torch.save(ckpt, run / "checkpoints" / "compiled.ckpt")
    model, meta = load_model(run / "checkpoints" / "compiled.ckpt")
    assert meta.history and meta.run_dir == run  # read as a Lightning checkpoint: its tracked history came along
    out = load_script("analyze").main([str(run / "checkpoints" / "compiled.ckpt"), "--out", str(tmp_path / "compiled")])
    assert torch.allclose(head_values(out), reference, atol=1e-4)


def test_a_run_folder_of_an_older_version_with_model_pt(fitted_run, tmp_path: Path) -> None:
    run = copy_run(fitted_run, tmp_path)
    paths = RunPaths(run)
    torch.save(load_checkpoint_file(paths.model, ""), paths.model_pt)  # the dict the older versions saved
    paths.model.unlink()
    assert load_model(run)[1].path == paths.model_pt
    out = load_script("analyze").main([str(run), "--out", str(tmp_path / "old")])
    assert torch.allclose(head_values(out), head_values(fitted_run.run_dir / "analysis"), atol=1e-4)


def test_a_model_file_outside_its_run_folder(fitted_run, tmp_path: Path) -> None:
    lonely = tmp_path / "model.safetensors"
    shutil.copy(RunPaths(fitted_run.run_dir).model, lonely)
    _, meta = load_model(lonely)
    assert meta.run_dir is None and meta.rung == "patch4" and len(meta.classes) == 10
    # no config.yaml beside it: the rung's config is composed with the same overrides
    out = load_script("analyze").main([str(lonely), *fitted_run.overrides])
    assert out == tmp_path / "model-analysis"
    assert torch.allclose(head_values(out), head_values(fitted_run.run_dir / "analysis"), atol=1e-4)


def one_line_error(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        load_script("analyze").main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def test_truncated_and_missing_checkpoints(fitted_run, tmp_path: Path, capsys) -> None:
    truncated = tmp_path / "model.safetensors"
    data = RunPaths(fitted_run.run_dir).model.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    assert str(truncated) in one_line_error(capsys, [str(truncated)])
    assert "no such checkpoint" in one_line_error(capsys, [str(tmp_path / "nope.ckpt")])
    (tmp_path / "empty_run").mkdir()
    assert "no checkpoints/model.safetensors" in one_line_error(capsys, [str(tmp_path / "empty_run")])
    torch.save({"weights": torch.zeros(3)}, tmp_path / "other.pt")
    assert "not a checkpoint this project wrote" in one_line_error(capsys, [str(tmp_path / "other.pt")])
    with pytest.raises(CheckpointError):
        load_model(truncated)


def test_a_run_being_trained_is_analysed_elsewhere_but_not_written_into(fitted_run, tmp_path: Path, capsys) -> None:
    run = copy_run(fitted_run, tmp_path)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    with run_lock(run):  # as train.py holds it while it trains the rung
        message = one_line_error(capsys, [str(run), "--images", "4"])
        out = load_script("analyze").main([str(run), "--images", "4", "--out", str(tmp_path / "peek")])
    assert message.startswith(f"error: {run} is in use by another process (pid {os.getpid()})"), message
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"} == before
    assert (out / "heads.csv").is_file()  # its checkpoint can still be read and analysed into another folder


def test_garbage_file_from_the_command_line(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.ckpt"
    garbage.write_bytes(b"\x00not a checkpoint at all" * 10)
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "analyze.py"), str(garbage)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(garbage) in lines[0]
    assert lines[0].endswith("give a run folder or its checkpoints/model.safetensors"), lines[0]  # not cut off


@pytest.mark.parametrize("name", ["model.pt", "last.ckpt"])
def test_a_checkpoint_with_a_pickle_payload_runs_nothing(
    fitted_run, tmp_path: Path, capsys, payload_checkpoint, name: str
) -> None:
    saved = {"model.pt": "model.safetensors"}.get(name, name)  # model.pt: an older version's, the same entries
    real = load_checkpoint_file(fitted_run.run_dir / "checkpoints" / saved, "")
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copy(fitted_run.run_dir / "config.yaml", run / "config.yaml")
    marker = tmp_path / "payload-ran"
    hostile = payload_checkpoint(run / "checkpoints" / name, marker, real)  # a real checkpoint, plus the payload
    for argv in ([str(hostile)], [str(run)]):  # the file itself, or the run folder holding it
        err = one_line_error(capsys, argv)
        assert err.startswith(f"error: {hostile}: refused") and not marker.exists(), err
    assert not (run / "analysis").exists()
