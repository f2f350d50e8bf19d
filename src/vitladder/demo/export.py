"""Export a trained model's attention as a self-contained static browser demo: ``index.html``, ``demo.css`` and
``demo.js`` (from ``static/``) and ``data.js`` (this run's numbers, :mod:`vitladder.demo.pack`), opened from disk or
any static server. The images are the first N of the run's own test split, as in the analysis.

``data.js`` holds the run's names and shape (``layers``, ``heads``, ``grid``, ``patch_size``, ``image_size``),
``lut`` (the colours of the 256 bytes), ``images`` (per image, :func:`attention_payload`) and ``position``
(the model's, :func:`position_payload`): about 300 KB an image at patch 4, and 5.5 KB for ``position``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import suppress
from importlib import resources
from pathlib import Path

import torch
from torch import Tensor

from vitladder.analysis.capture import capture_attention
from vitladder.analysis.checkpoint import load_model, load_run_config, test_split
from vitladder.analysis.metrics import attention_rollout
from vitladder.analysis.probes.positions import grid_correlation, patch_position_embeddings, position_similarity
from vitladder.atomic import write_text
from vitladder.data.augment import normalize
from vitladder.data.stats import ChannelStats
from vitladder.demo.pack import DATA_FORMAT, colormap_lut, encode_array, quantise_range, quantise_rows, render_data_js
from vitladder.errors import UserError
from vitladder.run_folder import is_finished, read_summary

STATIC_FILES = ("index.html", "demo.css", "demo.js")
BATCH = 64  # images per forward pass: bounds the float maps' memory
MAX_IMAGES = 256  # each image adds L x (H + 1) x T x N bytes to data.js (~270 KB base64 at patch 4), loaded whole
POSITION_RANGE = (-1.0, 1.0)  # cosine similarity on the analysis figure's fixed scale: one legend, runs compare


@torch.no_grad()
def attention_payload(model: torch.nn.Module, images_u8: Tensor, labels: Tensor, stats: ChannelStats) -> list[dict]:
    """Per image: pixels, label, prediction and quantised attention of every layer and head, the images normalised
    with ``stats``, those the model was trained with.

    ``attn`` is uint8 ``(L, H + 1, T, N)``: per layer, the H heads then their mean; per query
    token (0 = CLS, 1.. = patches), the attention to the N patch keys, each row scaled to its
    maximum (``scale``, float32 ``(L, H + 1, T)``). ``cls`` is the attention to the CLS key,
    ``round(255 * a)``. ``rollout`` is the CLS token's attention rollout over the patches.
    """
    logits, maps = capture_attention(model, normalize(images_u8, stats.mean, stats.std))  # (B, C), L x (B, H, T, T)
    attn = torch.stack(maps, dim=1)  # (B, L, H, T, T)
    attn = torch.cat([attn, attn.mean(dim=2, keepdim=True)], dim=2)  # (B, L, H + 1, T, T)
    codes, scale = quantise_rows(attn[..., 1:])  # (B, L, H + 1, T, N), (B, L, H + 1, T)
    to_cls = torch.round(attn[..., 0].clamp(0, 1) * 255).to(torch.uint8)  # (B, L, H + 1, T)
    rollout_codes, rollout_scale = quantise_rows(attention_rollout(maps))  # (B, N), (B,)
    probs = logits.softmax(dim=-1)  # (B, C)
    pixels = images_u8.permute(0, 2, 3, 1)  # (B, S, S, 3) RGB rows, as ImageData wants them
    return [
        {
            "label": int(labels[b]),
            "pred": int(probs[b].argmax()),
            "prob": round(float(probs[b].max()), 4),
            "pixels": encode_array(pixels[b], "u1"),
            "attn": encode_array(codes[b], "u1"),
            "scale": encode_array(scale[b], "f4"),
            "cls": encode_array(to_cls[b], "u1"),
            "rollout": encode_array(rollout_codes[b], "u1"),
            "rollout_scale": float(rollout_scale[b]),
        }
        for b in range(len(images_u8))
    ]


def position_payload(model: torch.nn.Module, grid: int) -> dict:
    """The cosine similarity of every pair of the model's learned patch position embeddings, for the map of
    the patch under the pointer (``analysis/probes/positions.py``; Dosovitskiy et al. 2021, Fig. 7).

    ``similarity`` is uint8 ``(N, N)``: row ``i`` is patch ``i``'s similarity to every patch, on the fixed
    scale ``[low, high] = [-1, 1]``, so its own cell is 255. ``grid_correlation`` is Spearman's rho between two
    patches' similarity and their centres' distance (null on a one-patch grid, where it has none).
    """
    similarity = position_similarity(patch_position_embeddings(model))  # (N, N)
    rho, (low, high) = grid_correlation(similarity, grid), POSITION_RANGE
    return {
        "similarity": encode_array(quantise_range(similarity, low, high), "u1"),
        "low": low,
        "high": high,
        "grid_correlation": rho if math.isfinite(rho) else None,
    }


def export_demo(source: Path, out_dir: Path | None = None, num_images: int = 16, overrides: Sequence[str] = ()) -> Path:
    """Write the demo of ``source`` (a run folder, model.safetensors, model.pt or last.ckpt) into ``out_dir`` (by
    default ``<run folder>/demo``, or ``<checkpoint stem>-demo`` beside a checkpoint in no run folder); returns
    index.html. ``overrides`` (``key=value``) change the run's config, e.g. where its data now lives."""
    if not 1 <= num_images <= MAX_IMAGES:
        raise UserError(f"--images must be between 1 and {MAX_IMAGES}, got {num_images}")
    model, meta = load_model(source)  # CheckpointError: one line naming the file
    cfg = load_run_config(meta, overrides)
    images, labels, classes = test_split(cfg)
    images, labels = images[:num_images], labels[:num_images]
    vit, done = meta.vit_config, {}
    if meta.run_dir is not None and is_finished(meta.run_dir):
        with suppress(OSError, ValueError):  # a damaged done.json costs the page its accuracy line, not the export
            done = read_summary(meta.run_dir)
    payload = {
        "format": DATA_FORMAT,
        "rung": str(meta.rung or done.get("rung") or cfg.rung),
        "ladder": str(meta.ladder or cfg.get("ladder") or ""),
        "test_acc": done.get("test_acc"),
        "checkpoint": meta.path.name,
        "classes": [str(c) for c in meta.classes or classes],  # shown as text by demo.js, never as markup
        "layers": vit.depth,
        "heads": vit.num_heads,
        "grid": vit.img_size // vit.patch_size,
        "patch_size": vit.patch_size,
        "image_size": vit.img_size,
        "lut": encode_array(colormap_lut(), "u1"),
        "position": position_payload(model, vit.img_size // vit.patch_size),
        "images": [
            entry
            for start in range(0, len(images), BATCH)
            for entry in attention_payload(
                model, images[start : start + BATCH], labels[start : start + BATCH], meta.stats
            )
        ],
    }
    if out_dir is None:
        out_dir = meta.run_dir / "demo" if meta.run_dir is not None else meta.path.parent / f"{meta.path.stem}-demo"
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    static = resources.files("vitladder.demo") / "static"
    files = {name: (static / name).read_text() for name in STATIC_FILES}
    files["data.js"] = render_data_js(payload)
    for name, text in sorted(files.items(), key=lambda item: item[0] == "index.html"):
        write_text(out_dir / name, text)  # index.html last: its presence means the demo is complete
    return out_dir / "index.html"
