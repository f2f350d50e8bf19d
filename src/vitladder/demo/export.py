"""Export a trained model's attention as a self-contained static browser demo, opened from disk or any static
server: ``index.html``, ``demo.css``, ``demo.js`` (``static/``) and ``data.js``: the run's names and shape, ``lut``
(the colours of the 256 bytes), ``images`` (the first N of the run's own test split, :func:`attention_payload`,
~300 KB each at patch 4) and ``position`` (:func:`position_payload`, 5.5 KB). tests/data_js.py reads data.js back.

Every map the page draws is scaled to its own maximum, so a row of attention is stored as its maximum (float32) and
``round(255 * a / max)`` (uint8): the page uses the bytes as colour indices, and ``byte / 255 * max`` recovers the
attention to within ``max / 510``. Values with a range of their own (cosine similarity, ``[-1, 1]``) are stored on
that fixed scale instead, so that every map shares one legend. Arrays travel as base64 inside ``data.js``, which sets
a global: pages opened from ``file://`` may load scripts but, in Chromium, may not fetch JSON.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Sequence
from contextlib import suppress
from importlib import resources
from pathlib import Path

import numpy as np
import torch
from matplotlib import colormaps
from torch import Tensor

from vitladder.analysis.capture import capture_attention
from vitladder.analysis.checkpoint import load_model, load_run_config, test_split
from vitladder.analysis.metrics import attention_rollout
from vitladder.analysis.probes.positions import grid_correlation, patch_position_embeddings, position_similarity
from vitladder.atomic import write_text
from vitladder.data.augment import normalize
from vitladder.data.stats import ChannelStats
from vitladder.errors import UserError
from vitladder.run_folder import is_finished, read_summary

DATA_FORMAT = "vitladder-demo/2"  # 2: the position embeddings' similarity
STATIC_FILES = ("demo.css", "demo.js", "index.html")  # index.html last: its presence means the demo is complete
BATCH = 64  # images per forward pass: bounds the float maps' memory
MAX_IMAGES = 256  # each image adds L x (H + 1) x T x N bytes to data.js (~270 KB base64 at patch 4), loaded whole


def quantise_rows(values: Tensor) -> tuple[Tensor, Tensor]:
    """Rows over the last dim -> (uint8 bytes, same shape; float32 row maxima, shape[:-1]). The largest entry of a
    row becomes 255; an all-zero row stays 0 with maximum 0."""
    values = values.detach().float().clamp_min(0)
    scale = values.amax(dim=-1)  # (...,)
    safe = torch.where(scale > 0, scale, 1.0).unsqueeze(-1)
    return torch.round(values / safe * 255).clamp(0, 255).to(torch.uint8), scale


def quantise_range(values: Tensor, low: float, high: float) -> Tensor:
    """Values on the fixed scale ``[low, high]`` -> uint8 bytes, same shape: ``low`` is 0, ``high`` is 255."""
    unit = (values.detach().float() - low) / (high - low)
    return torch.round(unit.clamp(0, 1) * 255).to(torch.uint8)


def encode_array(array: Tensor | np.ndarray, dtype: str) -> str:
    """base64 of the raw little-endian bytes (``dtype``: ``"u1"`` or ``"f4"``), C order."""
    if isinstance(array, Tensor):
        array = array.detach().cpu().numpy()
    return base64.b64encode(np.ascontiguousarray(array, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()).decode()


def colormap_lut() -> np.ndarray:
    """(256, 3) uint8 RGB of viridis: byte ``q`` of a map is drawn as ``lut[q]``."""
    rgba = colormaps["viridis"](np.linspace(0.0, 1.0, 256))  # (256, 4) floats in [0, 1]
    return np.round(rgba[:, :3] * 255).astype(np.uint8)


# Names in the payload come from the data and the checkpoint (class folders, the rung): as JSON string
# escapes, "<", ">" and "&" can never close the script or open a comment, wherever data.js is put.
_SCRIPT_SAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


def render_data_js(payload: dict) -> str:
    body = json.dumps(payload, separators=(",", ":")).translate(_SCRIPT_SAFE)  # ensure_ascii: U+2028 escaped too
    return (
        f"// vitladder browser demo data ({DATA_FORMAT}), written by scripts/export_demo.py.\n"
        f"window.VITLADDER_DEMO = {body};\n"
    )


@torch.no_grad()
def attention_payload(model: torch.nn.Module, images_u8: Tensor, labels: Tensor, stats: ChannelStats) -> list[dict]:
    """Per image (normalised with ``stats``, the model's): pixels, label, prediction and quantised attention.

    ``attn`` is uint8 ``(L, H + 1, T, N)``: per layer, the H heads then their mean; per query token (0 = CLS, 1.. =
    patches), the attention to the N patch keys, each row scaled to its maximum (``scale``, float32 ``(L, H + 1, T)``).
    ``cls`` is the attention to the CLS key, ``round(255 * a)``; ``rollout`` the CLS token's rollout over the patches.
    """
    logits, maps = capture_attention(model, normalize(images_u8, stats.mean, stats.std))  # (B, C), L x (B, H, T, T)
    attn = torch.stack(maps, dim=1)  # (B, L, H, T, T)
    attn = torch.cat([attn, attn.mean(dim=2, keepdim=True)], dim=2)  # (B, L, H + 1, T, T)
    codes, scale = quantise_rows(attn[..., 1:])  # (B, L, H + 1, T, N), (B, L, H + 1, T)
    to_cls = quantise_range(attn[..., 0], 0.0, 1.0)  # (B, L, H + 1, T)
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
    """The cosine similarity of every pair of the model's patch position embeddings (Dosovitskiy et al. 2021, Fig. 7):
    ``similarity``, uint8 ``(N, N)`` on the fixed scale ``[low, high] = [-1, 1]`` (a patch's own cell is 255), and
    ``grid_correlation``, Spearman's rho of similarity and distance (null on a one-patch grid, where it has none)."""
    similarity = position_similarity(patch_position_embeddings(model))  # (N, N)
    rho, (low, high) = grid_correlation(similarity, grid), (-1.0, 1.0)  # the analysis figure's scale: runs compare
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
    batches = zip(images[:num_images].split(BATCH), labels[:num_images].split(BATCH))
    vit, done = meta.vit_config, {}
    grid = vit.img_size // vit.patch_size
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
        "grid": grid,
        "patch_size": vit.patch_size,
        "image_size": vit.img_size,
        "lut": encode_array(colormap_lut(), "u1"),
        "position": position_payload(model, grid),
        "images": [entry for x, y in batches for entry in attention_payload(model, x, y, meta.stats)],
    }
    default = meta.run_dir / "demo" if meta.run_dir is not None else meta.path.parent / f"{meta.path.stem}-demo"
    out_dir = Path(default if out_dir is None else out_dir)
    write_text(out_dir / "data.js", render_data_js(payload))  # write_text makes the folder
    for name in STATIC_FILES:
        write_text(out_dir / name, (resources.files("vitladder.demo") / "static" / name).read_text())
    return out_dir / "index.html"
