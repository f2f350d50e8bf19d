"""Pack attention into the demo's compact ``data.js`` (tests/data_js.py reads it back).

Every map the page draws is scaled to its own maximum, so a row of attention is stored as its maximum (float32) and
``round(255 * a / max)`` (uint8): the page uses the bytes as colour indices, and ``byte / 255 * max`` recovers the
attention to within ``max / 510``. Values with a range of their own (cosine similarity, ``[-1, 1]``) are stored on
that fixed scale instead, so that every map shares one legend. Arrays travel as base64 inside ``data.js``, which sets
a global: pages opened from ``file://`` may load scripts but, in Chromium, may not fetch JSON.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import torch
from matplotlib import colormaps
from torch import Tensor

DATA_FORMAT = "vitladder-demo/2"  # 2: the position embeddings' similarity


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


def colormap_lut(name: str = "viridis") -> np.ndarray:
    """(256, 3) uint8 RGB of a matplotlib colormap: byte ``q`` of a map is drawn as ``lut[q]``."""
    rgba = colormaps[name](np.linspace(0.0, 1.0, 256))  # (256, 4) floats in [0, 1]
    return np.round(rgba[:, :3] * 255).astype(np.uint8)


# Names in the payload come from the data and the checkpoint (class folders, the rung): as JSON string
# escapes, "<", ">" and "&" can never close the script or open a comment, wherever data.js is put.
_SCRIPT_SAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


def render_data_js(payload: dict[str, Any]) -> str:
    body = json.dumps(payload, separators=(",", ":")).translate(_SCRIPT_SAFE)  # ensure_ascii: U+2028 escaped too
    return (
        f"// vitladder browser demo data ({DATA_FORMAT}), written by scripts/export_demo.py.\n"
        f"window.VITLADDER_DEMO = {body};\n"
    )
