"""export_demo on a run folder (and one of an older version, with model.pt) and on a bare model.safetensors: the
files, and numbers that match the model."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import numpy as np
import pytest
import torch
from data_js import decode_array, read_data_js
from entry_points import load_script

from vitladder.analysis.capture import capture_attention
from vitladder.analysis.checkpoint import load_model, load_run_config
from vitladder.analysis.checkpoint import test_split as run_test_split  # not collected as a test
from vitladder.analysis.metrics import attention_rollout
from vitladder.analysis.probes.positions import grid_correlation, patch_position_embeddings, position_similarity
from vitladder.data.augment import normalize
from vitladder.demo.export import STATIC_FILES, export_demo
from vitladder.errors import CheckpointError

REPO = Path(__file__).resolve().parents[2]


def reference(run: Path, n: int) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]:
    """(labels, float attention per layer, logits) of the first n test images, straight from the model."""
    model, meta = load_model(run)
    images, labels, _ = run_test_split(load_run_config(meta))
    logits, maps = capture_attention(model, normalize(images[:n], meta.stats.mean, meta.stats.std))  # the run's own
    return labels[:n], maps, logits


def test_export_writes_a_static_folder_in_the_run(demo_run: Path, demo_index: Path) -> None:
    assert demo_index == demo_run / "demo" / "index.html"
    for name in (*STATIC_FILES, "data.js"):
        path = demo_index.parent / name
        assert path.is_file() and path.stat().st_mode & stat.S_IROTH, name  # readable by a web server
    html = demo_index.read_text()
    assert '<script src="data.js"></script>' in html and "http" not in html.replace("http-equiv", "")  # no CDN


def test_exported_numbers_are_the_models(demo_run: Path, demo_index: Path) -> None:
    data = read_data_js(demo_index.parent / "data.js")
    L, H, G = data["layers"], data["heads"], data["grid"]
    N, T = G * G, G * G + 1
    assert (L, H, G, data["patch_size"], data["rung"]) == (7, 6, 8, 4, "patch4")
    assert data["test_acc"] == pytest.approx(json.loads((demo_run / "done.json").read_text())["test_acc"])
    assert data["classes"] == [f"class{i}" for i in range(10)]
    labels, maps, logits = reference(demo_run, len(data["images"]))
    attn = torch.stack(maps, dim=1)  # (B, L, H, T, T)
    attn = torch.cat([attn, attn.mean(dim=2, keepdim=True)], dim=2).numpy()  # heads, then their mean
    rollout = attention_rollout(maps).numpy()  # (B, N)
    for b, image in enumerate(data["images"]):
        assert image["label"] == int(labels[b]) and image["pred"] == int(logits[b].argmax())
        codes = decode_array(image["attn"], "u1", (L, H + 1, T, N)).astype(np.float64)
        scale = decode_array(image["scale"], "f4", (L, H + 1, T))
        np.testing.assert_allclose(scale, attn[b, ..., 1:].max(axis=-1), rtol=1e-6)
        values = codes / 255 * scale[..., None]
        assert np.abs(values - attn[b, ..., 1:]).max() <= scale.max() / 510 + 1e-6
        to_cls = decode_array(image["cls"], "u1", (L, H + 1, T)) / 255
        assert np.abs(to_cls - attn[b, ..., 0]).max() <= 1 / 510 + 1e-6
        roll = decode_array(image["rollout"], "u1", (N,)) / 255 * image["rollout_scale"]
        assert np.abs(roll - rollout[b]).max() <= image["rollout_scale"] / 510 + 1e-6
        assert decode_array(image["pixels"], "u1").size == 32 * 32 * 3


def test_exported_position_similarity_is_the_models(demo_run: Path, demo_index: Path) -> None:
    data = read_data_js(demo_index.parent / "data.js")
    N = data["grid"] ** 2
    position = data["position"]
    truth = position_similarity(patch_position_embeddings(load_model(demo_run)[0]))  # (N, N)
    codes = decode_array(position["similarity"], "u1", (N, N))
    assert (position["low"], position["high"]) == (-1.0, 1.0)
    values = position["low"] + codes / 255 * (position["high"] - position["low"])
    assert np.abs(values - truth.numpy()).max() <= 1 / 255 + 1e-6  # half a step of the fixed scale
    assert (np.diag(codes) == 255).all() and codes.min() < 255
    assert position["grid_correlation"] == pytest.approx(grid_correlation(truth, data["grid"]))
    assert len(position["similarity"]) == 4 * -(-N * N // 3)  # N x N bytes in base64, whatever the images


def test_export_of_a_bare_model_file_and_patch_8(make_run, tiny_data: list[str], tmp_path: Path) -> None:
    run = make_run(tmp_path / "runs", rung="patch8", patch_size=8, done=False)
    model = tmp_path / "model.safetensors"
    (run / "checkpoints" / "model.safetensors").rename(model)  # in no run folder: its rung's config is composed
    index = export_demo(model, num_images=3, overrides=[*tiny_data, "model.patch_size=8"])
    assert index == tmp_path / "model-demo" / "index.html"
    data = read_data_js(index.parent / "data.js")
    assert (data["grid"], data["patch_size"], data["rung"], len(data["images"])) == (4, 8, "patch8", 3)
    assert data["test_acc"] is None  # no done.json: the page says so instead of inventing a number
    codes = decode_array(data["images"][0]["attn"], "u1", (7, 7, 17, 16))
    assert (codes.max(axis=-1) == 255).all()
    assert (np.diag(decode_array(data["position"]["similarity"], "u1", (16, 16))) == 255).all()  # 4 x 4 grid


def test_a_run_folder_of_an_older_version_exports_the_same_demo(make_run, demo_index: Path, tmp_path: Path) -> None:
    old = make_run(tmp_path / "runs", model_pt=True)  # the same model, saved by torch.save as model.pt
    ours = read_data_js(demo_index.parent / "data.js")
    theirs = read_data_js(export_demo(old, num_images=len(ours["images"])).parent / "data.js")
    assert theirs == {**ours, "checkpoint": "model.pt"}


def test_script_writes_where_asked(demo_run: Path, tmp_path: Path, capsys) -> None:
    index = load_script("export_demo").main([str(demo_run), "--images", "2", "--out", str(tmp_path / "site")])
    assert index == tmp_path / "site" / "index.html"
    assert len(read_data_js(tmp_path / "site" / "data.js")["images"]) == 2
    assert index.resolve().as_uri() in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, message",
    [
        (["{missing}"], "no such checkpoint file or run folder"),
        (["{run}", "--images", "0"], "--images must be between 1 and 256, got 0"),
        (["{run}", "--images", "257"], "--images must be between 1 and 256, got 257"),
    ],
)
def test_script_reports_mistakes_in_one_line(demo_run: Path, tmp_path: Path, capsys, args, message) -> None:
    argv = [a.format(missing=tmp_path / "nope", run=demo_run) for a in args]
    with pytest.raises(SystemExit) as exit_info:
        load_script("export_demo").main([*argv, "--out", str(tmp_path / "site")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("error: ") and message in err and err.count("\n") == 1


def test_a_file_that_is_no_checkpoint_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "model.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="model.pt"):
        export_demo(bad)


def test_batches_do_not_change_the_numbers(demo_run: Path, demo_index: Path, tmp_path: Path, monkeypatch) -> None:
    import vitladder.demo.export as export

    monkeypatch.setattr(export, "BATCH", 2)  # 5 images -> batches of 2, 2, 1
    theirs = read_data_js(demo_index.parent / "data.js")
    index = export.export_demo(demo_run, tmp_path / "batched", num_images=len(theirs["images"]))
    ours = read_data_js(index.parent / "data.js")
    for a, b in zip(ours["images"], theirs["images"]):
        assert a["label"] == b["label"] and a["pred"] == b["pred"]
        diff = decode_array(a["attn"], "u1").astype(int) - decode_array(b["attn"], "u1").astype(int)
        assert np.abs(diff).max() <= 1  # float sums may round a byte the other way, never more


def test_a_checkpoint_with_a_pickle_payload_runs_nothing(make_run, tmp_path: Path, capsys, payload_checkpoint) -> None:
    run = make_run(tmp_path / "outputs", model_pt=True)
    model_pt = run / "checkpoints" / "model.pt"
    marker = tmp_path / "payload-ran"
    payload_checkpoint(model_pt, marker, torch.load(model_pt, weights_only=True))
    with pytest.raises(SystemExit) as exit_info:
        load_script("export_demo").main([str(run), "--images", "2"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and err.startswith(f"error: {model_pt}: refused"), err
    assert not marker.exists() and not (run / "demo").exists()
