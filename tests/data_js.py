"""A demo's data.js read back (undoing vitladder.demo.export's packing), for the tests of the demo and its page."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np
from torch import Tensor


def read_data_js(path: str | Path) -> dict[str, Any]:
    """The payload of a ``data.js`` written by ``render_data_js``."""
    text = Path(path).read_text()
    start, end = text.index("{"), text.rindex("}")
    return json.loads(text[start : end + 1])


def decode_array(text: str, dtype: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
    array = np.frombuffer(base64.b64decode(text), dtype=np.dtype(dtype).newbyteorder("<"))
    return array.reshape(shape) if shape is not None else array


def dequantise_rows(codes: Tensor, scale: Tensor) -> Tensor:
    """The inverse of ``quantise_rows``, exact to within ``scale / 510`` per entry."""
    return codes.float() / 255 * scale.float().unsqueeze(-1)


def dequantise_range(codes: Tensor, low: float, high: float) -> Tensor:
    """The inverse of ``quantise_range``, exact to within ``(high - low) / 510`` inside the range."""
    return low + codes.float() / 255 * (high - low)
